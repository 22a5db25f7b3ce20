// Google's Node.js client (@google-cloud/pubsub) against eoclient's reference server:
// IAM, schemas and push, as a Node user would call them. PUBSUB_EMULATOR_HOST points the
// client at the server; PUSH_URL is the test's local receiver. Prints one JSON object.
import pkg from '@google-cloud/pubsub';

const {PubSub} = pkg;
const pubsub = new PubSub({projectId: 'node-contract'});
const id = process.env.RUN_ID;
const out = {};

const [topic] = await pubsub.createTopic(`topic-${id}`);

// IAM: read, write a binding, read back, test a permission.
const [policy] = await topic.iam.getPolicy();
policy.bindings = [{role: 'roles/pubsub.publisher', members: ['user:node@example.com']}];
const [stored] = await topic.iam.setPolicy(policy);
out.iamBindings = stored.bindings.map(b => ({role: b.role, members: b.members}));
out.iamEtagChanged = Buffer.compare(Buffer.from(stored.etag), Buffer.from(policy.etag || '')) !== 0;
const [reread] = await topic.iam.getPolicy();
out.iamReread = reread.bindings.map(b => b.role);
const [permissions] = await topic.iam.testPermissions(['pubsub.topics.publish']);
out.iamPermissions = permissions;

// Schemas: an Avro schema, a topic bound to it (JSON), a valid and an invalid message.
const definition = JSON.stringify({
  type: 'record', name: 'Reading', fields: [{name: 'sensor', type: 'string'}],
});
const schema = await pubsub.createSchema(`schema-${id}`, 'AVRO', definition);
out.schemaName = await schema.getName();
const [bound] = await pubsub.createTopic({
  name: `bound-${id}`,
  schemaSettings: {schema: out.schemaName, encoding: 'JSON'},
});
out.boundSchema = (await bound.getMetadata())[0].schemaSettings.schema;
out.validMessageId = await bound.publishMessage({data: Buffer.from('{"sensor":"a"}')});
try {
  await bound.publishMessage({data: Buffer.from('{"sensor":1}')});
  out.invalidRefused = null;
} catch (error) {
  out.invalidRefused = {code: error.code, details: error.details};
}

// Push: a push subscription, one message POSTed to the receiver, then back to pull.
const [subscription] = await topic.createSubscription(`push-${id}`, {
  pushConfig: {pushEndpoint: process.env.PUSH_URL},
});
out.pushEndpoint = (await subscription.getMetadata())[0].pushConfig.pushEndpoint;
out.pushedMessageId = await topic.publishMessage({
  data: Buffer.from('pushed by node'),
  attributes: {origin: 'node'},
});
// Wait until the receiver has the POST (it counts them at RECEIVED_URL), 20 s at most.
for (let waited = 0; waited < 20000; waited += 50) {
  const received = await (await fetch(process.env.RECEIVED_URL)).json();
  if (received.count > 0) break;
  await new Promise(resolve => setTimeout(resolve, 50));
}
await subscription.modifyPushConfig({});
out.pushEndpointAfter = (await subscription.getMetadata())[0].pushConfig.pushEndpoint;

await pubsub.close();
console.log(JSON.stringify(out));

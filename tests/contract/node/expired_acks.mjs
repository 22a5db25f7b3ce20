// Google's Node.js client (@google-cloud/pubsub) acknowledging, and extending, thousands of
// expired ack ids in one call against eoclient's reference server (PUBSUB_EMULATOR_HOST).
// Each call's error is classified by the client's own code (ack-metadata.js, as the
// subscriber's handleAckFailures does), then a plain call on the same client shows the
// connection survived. Prints one JSON object.
import {readFileSync} from 'node:fs';
import pkg from '@google-cloud/pubsub';
import ackMetadata from '@google-cloud/pubsub/build/src/ack-metadata.js';

const {PubSub, v1} = pkg;
const {processAckErrorInfo, processAckRpcError} = ackMetadata;
const subscription = process.env.SUBSCRIPTION;
const ackIds = JSON.parse(readFileSync(process.env.ACK_IDS_FILE, 'utf8'));
const pubsub = new PubSub({projectId: 'node-contract'});
const client = new v1.SubscriberClient(await pubsub.getClientConfig());

// What the subscriber does with each id of a failed call (message-queues.js).
function classify(error) {
  const codes = processAckErrorInfo(error);
  const rpc = error.code ? processAckRpcError(error.code) : undefined;
  const result = {invalid: 0, other: 0, retry: 0, success: 0};
  for (const id of ackIds) {
    const code = codes.get(id) ?? rpc;
    if (code === undefined) result.success += 1;
    else if (code.transient) result.retry += 1;
    else if (code.response === 'INVALID') result.invalid += 1;
    else result.other += 1;
  }
  return result;
}

async function attempt(call) {
  const started = Date.now();
  try {
    await call({timeout: 20000});
    return {ok: true, seconds: (Date.now() - started) / 1000};
  } catch (error) {
    return {
      ok: false,
      seconds: (Date.now() - started) / 1000,
      code: error.code,
      details: error.details,
      listed: Object.keys(error.errorInfoMetadata ?? {}).length,
      unlisted: Number((error.errorInfoMetadata ?? {})['unlisted-failed-ack-ids'] ?? 0),
      results: classify(error),
    };
  }
}

const out = {};
out.ack = await attempt(options => client.acknowledge({subscription, ackIds}, options));
out.modack = await attempt(options =>
  client.modifyAckDeadline({subscription, ackIds, ackDeadlineSeconds: 30}, options)
);
out.after = await attempt(options => client.getSubscription({subscription}, options));
await client.close();
console.log(JSON.stringify(out));

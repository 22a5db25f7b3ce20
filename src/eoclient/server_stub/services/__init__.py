"""The services the reference server answers, independent of any transport.

One module per service (google.pubsub.v1's Publisher and Subscriber, google.iam.v1's
IAMPolicy, google.pubsub.v1's SchemaService, eoclient.broker.v1's BrokerPolicies); each
handler turns a request proto into the core's values, calls the broker, and turns the
answer back into a response proto. Both doors (``doors/``) run every call through one
method table, so faults, checks and durability are the same whichever door a call uses.
"""

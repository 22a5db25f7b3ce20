"""Generated protobuf code (private: never part of the public API).

``pubsub_pb2`` and ``schema_pb2`` (google.pubsub.v1), ``broker_policies_pb2`` (eoclient's
extension service eoclient.broker.v1) and ``pulsar_message_id_pb2`` (Pulsar's
``MessageIdData``) are produced by ``scripts/regen_proto.py`` from ``proto/``; do not
edit them by hand.
"""

"""Generated protobuf code for google.pubsub.v1 (private: never part of the public API).

``pubsub_pb2`` and ``schema_pb2`` are produced by ``scripts/regen_proto.py`` from
``proto/google/pubsub/v1``; do not edit them by hand.
"""

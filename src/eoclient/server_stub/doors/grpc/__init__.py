"""The gRPC door: generic grpc.aio handlers for every unary method, StreamingPull sessions,
and the hand-written encoding of the delivery path."""

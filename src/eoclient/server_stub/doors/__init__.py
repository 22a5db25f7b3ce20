"""The reference server's doors: how calls arrive (gRPC in ``grpc/``, REST/JSON in
``rest/``). A door decodes a request, runs it through the services' method table, and
encodes the answer or the error in its own transport's shape; it decides nothing."""

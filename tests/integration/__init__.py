"""Tier 3: the reference server (``run_server()``, in-process, port 0) over raw grpc.aio."""

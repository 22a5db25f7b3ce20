"""The reference server's tests, one folder per room of ``src/eoclient/server_stub``.

``core/`` is tier 1 (the pure broker on a fake clock, every test on both stores);
``storage/`` the SQLite store; ``services/``, ``doors/grpc/``, ``doors/rest/``,
``access/``, ``push/`` and ``observe/`` hold each room's pure tests next to the tests that
drive it through the in-process server (``run_server()``, 127.0.0.1 port 0) over the
wire. What spans the whole server lives beside this folder: ``differential/`` (the same
scenarios against Google's emulator), ``contract/`` (official clients), ``fuzz/`` and
``soak/``.
"""

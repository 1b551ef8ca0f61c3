"""A small HTTP service on 127.0.0.2 for phases to reach through the egress proxy (the operator's
``egress_private_allow`` names its address): every GET answers ``body``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def loopback_service(body: bytes) -> Iterator[str]:
    """Serves ``body`` to every GET while the block runs; yields its ``host:port``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.2:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

"""A stand-in package registry: a PEP 503 simple index serving one wheel built here, on a loopback address."""

from __future__ import annotations

import base64
import hashlib
import io
import ssl
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME, VERSION = "helixdemo", "1.0"
MESSAGE = "installed through the egress proxy"


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel of one module (file name, bytes)."""
    info = f"{NAME}-{VERSION}.dist-info"
    files = {
        f"{NAME}/__init__.py": f"MESSAGE = {MESSAGE!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: helix-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={_digest(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    return f"{NAME}-{VERSION}-py3-none-any.whl", buffer.getvalue()


class Registry:
    """Serves ``/simple/``, ``/simple/helixdemo/`` and the wheel; ``requests`` keeps (path, headers)."""

    def __init__(self, host: str, *, tls: ssl.SSLContext | None = None, authorization: str = "") -> None:
        """``tls``: served over HTTPS with this context; ``authorization``: every request must carry
        this ``Authorization`` header (401 otherwise), as a private index does."""
        self.wheel_name, self.wheel = build_wheel()
        self.requests: list[tuple[str, dict[str, str]]] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                if authorization and self.headers.get("authorization") != authorization:
                    self.send_response(401)
                    self.send_header("www-authenticate", 'Basic realm="index"')
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body, kind = registry.answer(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str) -> tuple[bytes | None, str]:
        path = path.split("?", 1)[0]
        if path == "/simple/":
            return f'<html><body><a href="/simple/{NAME}/">{NAME}</a></body></html>'.encode(), "text/html"
        if path == f"/simple/{NAME}/":
            digest = hashlib.sha256(self.wheel).hexdigest()
            link = f'<a href="/packages/{self.wheel_name}#sha256={digest}">{self.wheel_name}</a>'
            return f"<html><body>{link}</body></html>".encode(), "text/html"
        if path == f"/packages/{self.wheel_name}":
            return self.wheel, "application/octet-stream"
        if path.startswith("/big/") and path[5:].isdigit():  # bulk bytes, for a phase's traffic cap
            return b"z" * min(int(path[5:]), 64 << 20), "application/octet-stream"
        return None, "text/plain"

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def __enter__(self) -> Registry:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

"""A git server over HTTPS on a loopback address: ``git http-backend`` (smart HTTP, push enabled)
behind a small threaded server that requires one Basic credential, as a private git host would."""

from __future__ import annotations

import base64
import os
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class GitHttpsServer:
    """Serves the bare repositories under ``root`` at ``https://<host>:<port>/<name>.git``;
    ``requests`` keeps (method, path, authorization header) of each request."""

    def __init__(self, host: str, root: Path, *, cert_file: Path, key_file: Path, username: str, token: str) -> None:
        self.root = root
        self.requests: list[tuple[str, str, str]] = []
        expected = "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                auth = self.headers.get("authorization", "")
                server.requests.append((self.command, self.path, auth))
                if auth != expected:
                    body = b"authentication required\n"
                    self.send_response(401)
                    self.send_header("www-authenticate", 'Basic realm="git"')
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                path, _, query = self.path.partition("?")
                body = self._body()
                env = {"GIT_PROJECT_ROOT": str(server.root), "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
                       "QUERY_STRING": query, "REQUEST_METHOD": self.command, "REMOTE_USER": username,
                       "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": self.headers.get("content-type", ""),
                       "CONTENT_LENGTH": str(len(body)), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                       "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(server.root)}
                if self.headers.get("content-encoding"):
                    env["HTTP_CONTENT_ENCODING"] = self.headers["content-encoding"]
                if self.headers.get("git-protocol"):
                    env["GIT_PROTOCOL"] = self.headers["git-protocol"]
                out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                                     timeout=60).stdout
                head, _, payload = out.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.split(b"\r\n"):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.lower() == "status":
                        status = int(value.strip().split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            do_GET = do_POST = _serve

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def make_repository(self, name: str) -> Path:
        """A bare repository with one commit on main, pushes allowed."""
        bare = self.root / f"{name}.git"
        seed = self.root / f"{name}-seed"
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
        subprocess.run([*git, "init", "-q", str(seed)], check=True)
        (seed / "README.md").write_text("hello from the git server\n")
        subprocess.run([*git, "-C", str(seed), "add", "README.md"], check=True)
        subprocess.run([*git, "-C", str(seed), "commit", "-qm", "first"], check=True)
        subprocess.run([*git, "clone", "-q", "--bare", str(seed), str(bare)], check=True)
        subprocess.run(["git", "-C", str(bare), "config", "http.receivepack", "true"], check=True)
        return bare

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def __enter__(self) -> GitHttpsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

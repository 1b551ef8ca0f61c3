"""The ``apiKeyHelper`` command: asks the server's key broker for the API key and prints it.

Run by the Claude Code CLI as ``python -m helix_runner.process.key_helper <socket>`` (see
``key_broker``). Prints the key and exits 0, or prints why not on stderr and exits 1, which the
CLI reports as an authentication failure. Imports only the standard library so it starts fast.
"""

from __future__ import annotations

import socket
import sys

REQUEST = b"helix-key-request v1\n"  # keep in step with key_broker.REQUEST
TIMEOUT_S = 10.0
MAX_ANSWER = 64 * 1024


def fetch_key(socket_path: str) -> str:
    """The key from the broker at ``socket_path``; RuntimeError with the broker's reason if refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect(socket_path)
        sock.sendall(REQUEST)
        answer = bytearray()
        while b"\n" not in answer and len(answer) < MAX_ANSWER:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    line = bytes(answer).split(b"\n", 1)[0].decode("utf-8", "replace")
    if line.startswith("OK "):
        return line[3:]
    raise RuntimeError(line.removeprefix("ERR ") or "the key broker closed the connection")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m helix_runner.process.key_helper SOCKET", file=sys.stderr)
        return 2
    try:
        key = fetch_key(args[0])
    except (OSError, RuntimeError) as exc:
        print(f"helix-runner key helper: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(key + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

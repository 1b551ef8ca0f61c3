"""The scripted Messages API's HTTP server (:class:`ScriptedApi`) and its command line (``main``).

Each CLI process plays the script from its start: the CLI sends its session id with every request
(header ``x-claude-code-session-id``, shared by its subagents), and the server keeps how many uses
each turn has left per session. So in offline mode every phase gets the whole script, whatever the
phases before it used. Requests without that header (``curl``, the unit tests) share one state.
When no turn is left, the script's fallback answers so that a stray request never hangs.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import itertools
import json
import logging
import os
import signal
import socket
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from helix_runner.offline.env import cli_env
from helix_runner.offline.script import SESSION_HEADER, ApiError, Outcome, RecordedRequest, Script, Turn
from helix_runner.offline.sse import message_json, render_blocks, sse_events

__all__ = ["DEFAULT_MODEL", "MAX_SESSIONS", "ScriptedApi", "main"]

_log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-scripted"
"""Model name used in replies when neither the turn nor the request names one."""

MAX_SESSIONS = 4096
"""Sessions whose turn state is kept; the least recently seen one is forgotten beyond this."""


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its open connections so that stop() can cut them."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ScriptedApi) -> None:
        self.owner = owner
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _CutShort(Exception):
    """The connection ended before the request's body was whole: the client gave the request up."""


class _Handler(BaseHTTPRequestHandler):
    """Routes each HTTP request to the owning :class:`ScriptedApi`."""

    protocol_version = "HTTP/1.1"  # keep-alive and chunked SSE, as the real API serves them
    server_version = "helix-scripted-api"
    timeout = 120  # an idle keep-alive connection is dropped after this; stop() cuts them anyway
    server: _Server

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    def do_GET(self) -> None:
        self.server.owner._handle(self)

    def do_HEAD(self) -> None:
        self.server.owner._handle(self)

    def do_PUT(self) -> None:
        self.server.owner._handle(self)

    def do_DELETE(self) -> None:
        self.server.owner._handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s %s", self.address_string(), format % args)


class _TurnState:
    """A script turn and how many of its uses are left."""

    def __init__(self, index: int, turn: Turn) -> None:
        self.index = index
        self.turn = turn
        self.remaining = turn.times


class ScriptedApi:
    """The stand-in server: answers ``/v1/messages`` from a :class:`Script` and records every request.

    Runs an HTTP server on a daemon thread, so it serves sync tests, async tests and a foreground
    command alike. Use it as a context manager (``with`` or ``async with``) or call :meth:`start` /
    :meth:`stop`. ``port=0`` (default) picks a free ephemeral port; read it back from :attr:`base_url`.
    """

    def __init__(
        self,
        script: Script | Mapping[str, Any] | Sequence[Turn] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count(1)
        # Ids unique across stand-ins too, as the real API's are: with replicas, each runs its own
        # stand-in, and a phase moved to another replica resumes a transcript that holds the first
        # one's ids; a repeated tool_use id there makes the CLI drop the later call's result.
        self._instance = os.urandom(4).hex()
        self.set_script(script)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and start serving; returns once the socket accepts connections."""
        if self._server is not None:
            raise RuntimeError("ScriptedApi is already running")
        self._server = _Server((self._host, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-api:{self._server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        _log.info("scripted Messages API listening on %s", self.base_url)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: abort replies still streaming, close open connections, join the thread.

        Safe to call twice. Never blocks longer than about ``timeout`` seconds.
        """
        server, thread = self._server, self._thread
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedApi is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to put in ``ANTHROPIC_BASE_URL``, e.g. ``http://127.0.0.1:41234``."""
        return f"http://{self._host}:{self.port}"

    def cli_env(self, home: str | os.PathLike[str], **kwargs: Any) -> dict[str, str]:
        """:func:`cli_env` for this server's URL."""
        return cli_env(self.base_url, home=home, **kwargs)

    # ---- script ------------------------------------------------------------------------------------

    def set_script(self, script: Script | Mapping[str, Any] | Sequence[Turn] | None) -> None:
        """Replace the script (and forget how much of the old one every session used); recordings are kept."""
        if script is None:
            script = Script()
        elif isinstance(script, Mapping):
            script = Script.from_dict(script)
        elif not isinstance(script, Script):
            script = Script(turns=list(script))
        with self._lock:
            self._script = script
            self._sessions: OrderedDict[str, list[_TurnState]] = OrderedDict()

    @property
    def script(self) -> Script:
        return self._script

    def pending_turns(self, session_id: str = "") -> list[int]:
        """Indices of turns a session (default: requests without a session id) has uses left of.

        Empty once that session played the script completely; all turns for a session not seen yet.
        """
        with self._lock:
            states = self._sessions.get(session_id)
            if states is None:
                return list(range(len(self._script.turns)))
            return [state.index for state in states if state.remaining > 0]

    def _states_of(self, session_id: str) -> list[_TurnState]:
        """The turn state of a session, fresh from the script's start the first time (lock held)."""
        states = self._sessions.get(session_id)
        if states is None:
            states = self._sessions[session_id] = [_TurnState(i, t) for i, t in enumerate(self._script.turns)]
            if len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        return states

    def _take_turn(self, body: Any, session_id: str = "") -> tuple[Turn, int | None]:
        with self._lock:
            for state in self._states_of(session_id):
                if state.remaining > 0 and (state.turn.match is None or state.turn.match.matches(body)):
                    state.remaining -= 1
                    return state.turn, state.index
        return self._script.fallback, None

    # ---- recording ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def message_requests(self) -> list[RecordedRequest]:
        """Requests that were answered from the script or the fallback (``POST /v1/messages``)."""
        return [r for r in self.requests if r.outcome in ("reply", "error", "fallback")]

    def fallback_requests(self) -> list[RecordedRequest]:
        """Message requests that no scripted turn matched."""
        return [r for r in self.requests if r.outcome == "fallback"]

    def wait_for_requests(
        self,
        count: int,
        *,
        timeout: float,
        predicate: Callable[[RecordedRequest], bool] | None = None,
    ) -> list[RecordedRequest]:
        """Block until ``count`` message requests (or requests matching ``predicate``) were recorded.

        Returns them; raises TimeoutError after ``timeout`` seconds.
        """

        def selected() -> list[RecordedRequest]:
            if predicate is None:
                return [r for r in self._requests if r.outcome in ("reply", "error", "fallback")]
            return [r for r in self._requests if predicate(r)]

        with self._changed:
            if not self._changed.wait_for(lambda: len(selected()) >= count, timeout):
                raise TimeoutError(f"expected {count} request(s), got {len(selected())} within {timeout}s")
            return selected()

    async def wait_for_requests_async(
        self,
        count: int,
        *,
        # The wait runs in a worker thread, which cancelling the awaiting task cannot stop, so the bound
        # has to travel with the call instead of coming from asyncio.timeout().
        timeout: float,  # noqa: ASYNC109
        predicate: Callable[[RecordedRequest], bool] | None = None,
    ) -> list[RecordedRequest]:
        """:meth:`wait_for_requests` without blocking the event loop."""
        return await asyncio.to_thread(self.wait_for_requests, count, timeout=timeout, predicate=predicate)

    def _record(self, **fields: Any) -> None:
        with self._changed:
            self._requests.append(RecordedRequest(index=len(self._requests), **fields))
            self._changed.notify_all()

    # ---- request handling --------------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_scripted_{self._instance}_{next(self._ids):06d}"

    def _handle(self, handler: _Handler) -> None:
        received_at = time.monotonic()
        split = urlsplit(handler.path)
        path = split.path.rstrip("/") or "/"
        try:
            raw = self._read_body(handler)
        except _CutShort:
            # As a real HTTP server: a body shorter than its framing said is no request (the
            # gateway relies on it: it closes a refused request's connection before its end).
            _log.debug("scripted API: %s %s ended before its body was whole", handler.command, handler.path)
            handler.close_connection = True
            return
        body = self._parse_body(raw, handler.headers.get("content-encoding"))
        headers = {
            name.lower(): ("<redacted>" if name.lower() in ("x-api-key", "authorization") else value)
            for name, value in handler.headers.items()
        }
        api_key = handler.headers.get("x-api-key")
        api_key_sha256 = hashlib.sha256(api_key.encode()).hexdigest() if api_key is not None else None

        def record(
            outcome: Outcome, status: int, turn_index: int | None = None, label: str | None = None
        ) -> None:
            self._record(
                method=handler.command,
                path=path,
                query=split.query,
                headers=headers,
                body=body,
                outcome=outcome,
                status=status,
                turn_index=turn_index,
                label=label,
                received_at=received_at,
                api_key_sha256=api_key_sha256,
            )

        request_id = self._next_id("req")
        if handler.command == "POST" and path == "/v1/messages/count_tokens":
            # Rough count (about 4 characters per token); the CLI only uses it for estimates.
            tokens = max(1, len(json.dumps(body)) // 4) if body is not None else 1
            record("count_tokens", 200)
            self._send_json(handler, 200, {"input_tokens": tokens}, request_id)
            return
        if handler.command != "POST" or path != "/v1/messages":
            _log.warning("scripted API: unhandled %s %s", handler.command, handler.path)
            record("unknown_endpoint", 404)
            error = ApiError(404, message=f"scripted API does not serve {handler.command} {path}")
            self._send_json(handler, 404, error.body(request_id), request_id)
            return
        if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
            record("bad_request", 400)
            error = ApiError(400, message="request body must be a JSON object with a messages list")
            self._send_json(handler, 400, error.body(request_id), request_id)
            return

        turn, turn_index = self._take_turn(body, handler.headers.get(SESSION_HEADER, ""))
        outcome: Outcome = (
            "fallback" if turn_index is None else ("error" if isinstance(turn, ApiError) else "reply")
        )
        if turn_index is None:
            _log.warning("scripted API: no scripted turn for request %s; serving the fallback", request_id)
        if isinstance(turn, ApiError):
            record(outcome, turn.status, turn_index, turn.label)
            extra_headers = {}
            if turn.retry_after is not None:
                extra_headers["retry-after"] = f"{turn.retry_after:g}"
            if turn.should_retry is not None:
                extra_headers["x-should-retry"] = "true" if turn.should_retry else "false"
            self._send_json(handler, turn.status, turn.body(request_id), request_id, extra_headers)
            return

        record(outcome, 200, turn_index, turn.label)
        model = turn.model or str(body.get("model") or DEFAULT_MODEL)
        blocks = render_blocks(turn, lambda: self._next_id("toolu"))
        message_id = self._next_id("msg")
        if body.get("stream"):
            self._send_sse(handler, sse_events(message_id, model, blocks, turn), turn.chunk_delay, request_id)
        else:
            self._send_json(handler, 200, message_json(message_id, model, blocks, turn), request_id)

    @staticmethod
    def _read_body(handler: _Handler) -> bytes:
        """The request's body; _CutShort if the connection ended first."""
        if handler.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                line = handler.rfile.readline()
                if not line:
                    raise _CutShort
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    handler.rfile.readline()  # the blank line after the last chunk (no trailers expected)
                    break
                part = handler.rfile.read(size)
                if len(part) < size:
                    raise _CutShort
                parts.append(part)
                handler.rfile.readline()
            return b"".join(parts)
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length > 0 else b""
        if len(body) < length:
            raise _CutShort
        return body

    @staticmethod
    def _parse_body(raw: bytes, encoding: str | None) -> Any:
        if not raw:
            return None
        try:
            if encoding and encoding.lower() == "gzip":
                raw = gzip.decompress(raw)
            elif encoding and encoding.lower() == "deflate":
                raw = zlib.decompress(raw)
        except (OSError, zlib.error):
            return raw.decode("utf-8", errors="replace")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return raw.decode("utf-8", errors="replace")

    @staticmethod
    def _send_json(
        handler: _Handler,
        status: int,
        payload: Any,
        request_id: str,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Overloaded" if status == 529 else "Error"
        handler.send_response(status, reason)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.send_header("request-id", request_id)
        for name, value in (extra_headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        handler.wfile.flush()

    def _send_sse(self, handler: _Handler, events: Iterable[bytes], delay: float, request_id: str) -> None:
        stopping = handler.server.stopping
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("transfer-encoding", "chunked")
        handler.send_header("request-id", request_id)
        handler.end_headers()
        try:
            for number, event in enumerate(events):
                if number and delay and stopping.wait(delay):
                    handler.close_connection = True
                    return  # stopping: leave the stream unterminated, like a dropped connection
                handler.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client went away (e.g. the CLI was interrupted)


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a script file in the foreground until SIGINT/SIGTERM (``python -m helix_runner.offline``)."""
    parser = argparse.ArgumentParser(description="Scripted stand-in for the Anthropic Messages API.")
    parser.add_argument("--script", type=Path, help="JSON script file (default: fallback replies only)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    script = Script.load(args.script) if args.script else Script()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with ScriptedApi(script, host=args.host, port=args.port) as api:
        print(f"ANTHROPIC_BASE_URL={api.base_url}", flush=True)
        done.wait()
        requests = api.requests
    print(
        f"served {len(requests)} request(s), {sum(r.outcome == 'fallback' for r in requests)} by the fallback"
    )
    return 0

"""Offline mode: a loopback stand-in for the Anthropic Messages API that answers from a script.

The real Claude Code CLI can be pointed at it (``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``) and then
runs exactly as it would against the real API: it streams the scripted replies, executes the tools
they ask for (Bash, Write, Agent, ...) and sends the tool results back in its next request. This makes
the CLI's behaviour reproducible without credentials, which the runner's offline mode and its tests
rely on. It is a test environment that ships with the product, like ``temporalio.testing``; this
module is its public face, the modules behind it hold one concept each:

* ``script.py``: the script model (content blocks, :class:`Reply`, :class:`ApiError`,
  :class:`RequestMatcher`, :class:`Script`) and :class:`RecordedRequest`;
* ``sse.py``: a reply rendered as the API's server-sent events;
* ``env.py``: :func:`cli_env`, the environment of a CLI child pointed at the stand-in, with every real
  credential withheld;
* ``server.py``: :class:`ScriptedApi`, the threaded HTTP server that plays a script per CLI session and
  records every request, and ``main`` (``python -m helix_runner.offline``, ``helix-runner mock-api``).

Example::

    script = Script([Reply.tool_use("Bash", {"command": "echo hi"}), Reply.text("done")])
    with ScriptedApi(script) as api:
        env = api.cli_env(home="/tmp/home")
        argv = [claude, "-p", "hi", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]
        subprocess.run(argv, env=env, cwd=workdir, timeout=60)
        assert api.message_requests()[1].tool_results()[0]["content"] == "hi"

Only the standard library is used, so the package runs anywhere the runner runs, and it imports
nothing else from helix_runner (the ``offline-standalone`` import contract in pyproject.toml).
"""

from helix_runner.offline.env import DEFAULT_API_KEY, cli_env
from helix_runner.offline.script import (
    SESSION_HEADER,
    ApiError,
    ContentBlock,
    RecordedRequest,
    Reply,
    RequestMatcher,
    Script,
    ScriptError,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Turn,
    Usage,
)
from helix_runner.offline.server import DEFAULT_MODEL, ScriptedApi, main

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_MODEL",
    "SESSION_HEADER",
    "ApiError",
    "ContentBlock",
    "RecordedRequest",
    "Reply",
    "RequestMatcher",
    "Script",
    "ScriptError",
    "ScriptedApi",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Turn",
    "Usage",
    "cli_env",
    "main",
]

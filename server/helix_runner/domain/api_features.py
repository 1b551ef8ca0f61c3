"""What in a Messages API request makes the API itself reach out: the features the gateway refuses
unless a phase or its server allows them by name (issue 30.4).

The gateway keeps the API key out of a phase, but the API fetches what a request tells it to, with
the phase's data in the request: an image or a document given by URL, the ``web_fetch`` and
``web_search`` server tools, code execution (which may reach the network), ``mcp_servers``
connectors, and references to files or containers kept at the API (which another key's phase may
have put there). A tool of the phase can send such a body with its CLI's capability. The CLI's own
requests carry none of them (checked against CLI 2.1.332: its tools run locally).

``findings`` reads only what it needs, with typed msgspec decoders (unknown fields skipped at C
speed): the top-level keys, each message's content blocks (and the blocks inside tool results),
the system blocks and the tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

# The names a phase (PhaseOptions.api_features) or the server (api_features_allow) allows.
FEATURES: dict[str, str] = {
    "url_sources": "an image or document the API fetches from a URL",
    "file_sources": "a file kept at the API (Files API), referenced by id",
    "web_fetch": "the web_fetch server tool: the API fetches pages the model names",
    "web_search": "the web_search server tool: the API searches the web",
    "code_execution": "the code execution server tool: code the API runs, which may reach the network",
    "mcp_servers": "MCP connectors: servers the API calls on the request's behalf",
    "container": "a container kept at the API, or a file uploaded into one",
}

# Server tools by the prefix of their versioned type (web_search_20250305, web_fetch_20250910,
# code_execution_20250825, ...).
_TOOL_PREFIXES = (("web_fetch", "web_fetch"), ("web_search", "web_search"), ("code_execution", "code_execution"),
                  ("bash_code_execution", "code_execution"), ("text_editor_code_execution", "code_execution"),
                  ("mcp", "mcp_servers"))


class _Source(msgspec.Struct):
    type: str = ""


class _Block(msgspec.Struct):
    type: str = ""
    source: _Source | None = None
    content: list[_Block] | str | None = None  # a tool_result's blocks


class _Message(msgspec.Struct):
    role: str = ""
    content: list[_Block] | str = ""


class _Tool(msgspec.Struct):
    type: str = ""
    name: str = ""


class _Body(msgspec.Struct):
    messages: list[_Message] = []
    system: list[_Block] | str | None = None
    tools: list[_Tool] | None = None
    mcp_servers: list[Any] | None = None
    container: Any = None


_decode = msgspec.json.Decoder(_Body).decode


@dataclass(frozen=True)
class Finding:
    """One use of a feature in a request: which (a name of ``FEATURES``) and where (a JSON path)."""

    feature: str
    where: str


class BodyError(ValueError):
    """The body is not a Messages request this module can read (its shape, not its features)."""


def findings(body: bytes) -> list[Finding]:
    """Every use of a feature of ``FEATURES`` in the Messages request ``body`` (JSON), in order."""
    try:
        request = _decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BodyError(str(exc).split("\n")[0][:200]) from None
    out: list[Finding] = []
    if request.mcp_servers:
        out.append(Finding("mcp_servers", "mcp_servers"))
    if request.container is not None:
        out.append(Finding("container", "container"))
    for i, tool in enumerate(request.tools or ()):
        for prefix, feature in _TOOL_PREFIXES:
            if tool.type.startswith(prefix):
                out.append(Finding(feature, f"tools[{i}] ({tool.type})"))
                break
    if isinstance(request.system, list):
        _blocks(request.system, "system", out)
    for i, message in enumerate(request.messages):
        if isinstance(message.content, list):
            _blocks(message.content, f"messages[{i}].content", out)
    return out


def _blocks(blocks: list[_Block], path: str, out: list[Finding]) -> None:
    for j, block in enumerate(blocks):
        where = f"{path}[{j}]"
        if block.type == "container_upload":
            out.append(Finding("container", f"{where} (container_upload)"))
        if block.source is not None:
            if block.source.type == "url":
                out.append(Finding("url_sources", f"{where} ({block.type} from a URL)"))
            elif block.source.type == "file":
                out.append(Finding("file_sources", f"{where} ({block.type} by file id)"))
        if isinstance(block.content, list):
            _blocks(block.content, f"{where}.content", out)


def refused(body: bytes, allowed: frozenset[str]) -> list[Finding]:
    """The findings of ``body`` whose feature ``allowed`` does not name."""
    return [f for f in findings(body) if f.feature not in allowed]


def validate_names(names: Any, field: str) -> tuple[str, ...]:
    """Names of features as given (a request's or the config's); ValueError naming an unknown one."""
    out = tuple(dict.fromkeys(str(n).strip() for n in names if str(n).strip()))
    unknown = [n for n in out if n not in FEATURES]
    if unknown:
        raise ValueError(f"{field}: unknown feature {unknown[0]!r}; known: {', '.join(FEATURES)}")
    return out

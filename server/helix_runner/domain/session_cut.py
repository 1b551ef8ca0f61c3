"""A CLI session transcript cut at a checkpoint, for a fork or a rewind to resume (CLI 2.1.332).

What the CLI does with a session (docs/claude-cli-protocol.md §3.8, captured against the real CLI):

* ``--resume <id> --fork-session --resume-session-at <entry uuid>`` loads ``<id>.jsonl`` from the
  project directory of its working directory, keeps the conversation up to and including that entry,
  and continues under a new session id; the file may have any name (the cut copy gets a fresh one, so
  the phase forked keeps its own file untouched), and a copy in another directory's project folder
  is told about the new working directory.
* Entries *after* the cut must not be in the file: the CLI looks tool results up by ``tool_use_id``
  across the whole file, so a call re-decided at the cut would show the model its original result.
  The copy therefore ends with the cut entry (and carries no ``cost-state`` entry: the fork's CLI
  reports only its own spending).
* A call denied: the copy ends with the entry carrying the call, and the first stdin line carries
  the call's result (an ``is_error`` ``tool_result``, the denial): the model is sent that result.
* A call edited: the copy ends with the entry carrying the call, its input replaced by the edited
  one, followed by a ``hook_deferred_tool`` attachment (what the CLI itself writes when a PreToolUse
  hook defers a call). Resumed there, the CLI runs that call again, under its own ``tool_use_id``.
  It asks the PreToolUse hook first *if* the ``initialize`` request registering the hook was read
  by then: the resumed turn starts without waiting for it (a deferred deny went unasked and the
  call ran in 4 of 10 forks under load), so neither decision may depend on the hook being asked.
"""

from __future__ import annotations

import datetime
import uuid as uuid_module
from dataclasses import dataclass

import orjson


class SessionCutError(ValueError):
    """The transcript does not hold the entry to cut at (or the call to decide)."""


@dataclass(frozen=True)
class SessionCut:
    """The cut copy (bytes of a ``.jsonl`` file) and the entry to resume at."""

    transcript: bytes
    resume_at: str


# The fields of a transcript entry that say where and by what it was written (copied onto the attachment).
_CONTEXT_FIELDS = ("isSidechain", "userType", "cwd", "sessionId", "version", "gitBranch", "entrypoint")


def _entries(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if line.strip()]


def _uuid_of(line: bytes, wanted: bytes) -> dict | None:
    if wanted not in line:  # most lines are skipped without parsing
        return None
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) and entry.get("uuid") == wanted.decode() else None


def last_cost_state(data: bytes) -> dict | None:
    """The ``modelUsage`` of the transcript's last ``cost-state`` entry: the session's true totals,
    which the CLI saves when it exits (also on SIGTERM), its last message's final usage included."""
    for line in reversed(_entries(data)):
        if b'"cost-state"' not in line:
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("type") == "cost-state" and isinstance(entry.get("modelUsage"), dict):
            return entry["modelUsage"]
    return None


def renamed(data: bytes, session_id: str) -> bytes:
    """The transcript with every entry's ``sessionId`` set to ``session_id``: a copy of a cut session
    is a session of its own. The CLI reads every file of a session id it finds in the project
    directory: a copy still naming the phase's session showed the model the phase's later results
    (a sandbox's session store keeps both files there)."""
    lines = []
    for line in _entries(data):
        if b'"sessionId":"' in line:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                lines.append(line)
                continue
            if isinstance(entry, dict) and "sessionId" in entry:
                entry["sessionId"] = session_id
                line = orjson.dumps(entry)
        lines.append(line)
    return b"\n".join(lines) + b"\n"


def cut_after(data: bytes, at: str) -> SessionCut:
    """The transcript up to and including the entry ``at`` (the conversation after a call's result)."""
    lines = _entries(data)
    wanted = at.encode()
    for i, line in enumerate(lines):
        if _uuid_of(line, wanted) is not None:
            return SessionCut(b"\n".join(lines[: i + 1]) + b"\n", at)
    raise SessionCutError(f"the session's transcript has no entry {at} (not written yet, or another session's)")


def _call_entry(lines: list[bytes], call_at: str, tool_use_id: str) -> tuple[int, dict, dict]:
    """The index of the entry ``call_at``, the entry, and its ``tool_use`` block ``tool_use_id``."""
    wanted = call_at.encode()
    for i, line in enumerate(lines):
        entry = _uuid_of(line, wanted)
        if entry is None:
            continue
        content = (entry.get("message") or {}).get("content")
        call = next((b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
                     and b.get("id") == tool_use_id), None) if isinstance(content, list) else None
        if call is None:
            raise SessionCutError(f"entry {call_at} carries no call {tool_use_id}")
        return i, entry, call
    raise SessionCutError(f"the session's transcript has no entry {call_at} (not written yet, or another session's)")


def cut_at_call(data: bytes, call_at: str, tool_use_id: str) -> SessionCut:
    """The transcript up to the entry ``call_at`` carrying the call ``tool_use_id``, for a resume whose
    first user line answers the call (``call_result_line``)."""
    lines = _entries(data)
    i, _, _ = _call_entry(lines, call_at, tool_use_id)
    return SessionCut(b"\n".join(lines[: i + 1]) + b"\n", call_at)


def call_result_line(tool_use_id: str, text: str) -> bytes:
    """The stream-json user line that gives a call its result as an error: the denial the model reads."""
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": True, "content": text}
    return orjson.dumps({"type": "user", "message": {"role": "user", "content": [block]}, "parent_tool_use_id": None})


def cut_before_result(data: bytes, call_at: str, tool_use_id: str, new_input: dict, *,
                      now: datetime.datetime | None = None, entry_id: str | None = None) -> SessionCut:
    """The transcript up to the entry ``call_at`` carrying the call ``tool_use_id`` (its input now
    ``new_input``), then a deferred-call attachment: resumed at it, the CLI runs the call again."""
    lines = _entries(data)
    i, entry, call = _call_entry(lines, call_at, tool_use_id)
    call["input"] = new_input  # ``call`` is a block of ``entry``: the entry as written carries the edit
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    attachment = {
        "parentUuid": call_at,
        **{k: entry[k] for k in _CONTEXT_FIELDS if k in entry},
        "type": "attachment",
        "uuid": entry_id or str(uuid_module.uuid4()),
        "timestamp": stamp,
        "attachment": {"type": "hook_deferred_tool", "toolUseID": tool_use_id, "toolName": call.get("name", ""),
                       "toolInput": new_input, "hookName": "helix-runner",
                       "hookEvent": "PreToolUse", "permissionMode": "default"},
    }
    return SessionCut(b"\n".join([*lines[:i], orjson.dumps(entry)]) + b"\n" + orjson.dumps(attachment) + b"\n",
                      attachment["uuid"])

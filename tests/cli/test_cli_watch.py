"""`watch` and `replay` against the real server and real CLI phases (offline mode).

`replay --speed 10` of a phase, `replay` of a `watch --json` capture and `watch` of the finished
phase print exactly the lines `watch` printed live; a raw `stdout.jsonl` recording replays to the
same tool and text lines; a dropped connection is re-attached by cursor without a gap or a repeat.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from support.cli_verbs import helix, run_verb
from support.streams import PhaseCall
from support.tcp_proxy import TcpProxy

from helix.runner.v1 import resources_pb2 as res
from helix_runner.offline import ApiError, Reply

pytestmark = pytest.mark.real_cli

_LINE = re.compile(r"^(?P<time>[\d:. ]{12}) #(?P<seq>\d+)\s+(?P<kind>\w+)\s+(?P<detail>.*)$")


def parsed(lines: list[str]) -> list[dict[str, str]]:
    return [m.groupdict() for line in lines if (m := _LINE.match(line))]


async def test_replay_prints_what_watch_printed_live(claude_binary, scripted_api, runner_factory, tmp_path):
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": "echo hello"}, chunk_delay=0.05),
            Reply.tool_use("Bash", {"command": "ls /nonexistent-dir"}),
            ApiError(429),
            Reply.text("all done"),
        ]
    )
    async with runner_factory(api) as runner:
        at = f"127.0.0.1:{runner.server.port}"
        phase = PhaseCall(runner.stub, "wj", "p1", str(runner.workdir), allowed_tools=["Bash"])
        await phase.wait_for(lambda e: True)  # the phase exists (its first event arrived) before watch asks
        live = asyncio.create_task(helix(at, "watch", "wj", "p1"))
        result = await phase.finish()
        watched = await live
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert watched.code == 0, watched.err

        events = parsed(watched.lines)
        assert [int(e["seq"]) for e in events] == list(range(1, result.last_sequence + 1))
        details = [(e["kind"], e["detail"]) for e in events]
        assert ("tool_call_started", '→ Bash  {"command":"echo hello"}') in details
        finished = [d for k, d in details if k == "tool_call_finished"]
        assert finished[0].startswith("✓ Bash  ") and finished[0].endswith("  hello")
        assert finished[1].startswith("✗ Bash  ") and "No such file or directory" in finished[1]
        assert any(
            k == "api_retry" and d.startswith("retry 1/2 in ") and d.endswith("HTTP 429") for k, d in details
        )
        assert watched.lines[-2] == "SUCCEEDED: completed"
        assert (
            watched.lines[-1]
            .strip()
            .startswith("job wj phase p1, exit code 0, 3 turns, 2 tool calls (1 failed), $")
        )

        replayed = await helix(at, "replay", "wj", "p1", "--speed", "10")
        assert replayed.code == 0, replayed.err
        assert replayed.out == watched.out

        again = await helix(at, "watch", "wj", "p1")  # a finished phase: the recording, then the result
        assert again.out == watched.out

        capture = await helix(at, "watch", "wj", "p1", "--json")
        (tmp_path / "capture.jsonl").write_text(capture.out)
        from_file = await asyncio.to_thread(run_verb, "replay", str(tmp_path / "capture.jsonl"))
        assert from_file.code == 0 and from_file.out == watched.out

        tools_only = await helix(at, "watch", "wj", "p1", "--filter", "tools", "--from", "3")
        kinds = {e["kind"] for e in parsed(tools_only.lines)}
        assert kinds == {"tool_call_started", "tool_call_finished"}
        assert min(int(e["seq"]) for e in parsed(tools_only.lines)) > 3

        head = await helix(at, "replay", "wj", "p1", "--to-sequence", "5")
        assert head.code == 0 and head.lines == watched.lines[:5]

        missing = await helix(at, "watch", "wj", "p2")
        assert missing.code == 4 and missing.err.splitlines() == [
            "helix-runner: error: phase p2 of job wj does not exist [PHASE_NOT_FOUND]"
        ]
        missing = await helix(at, "replay", "wj", "p2")
        assert missing.code == 4 and "phase p2 not found in job wj (phases: p1)" in missing.err
        bad = await helix(at, "watch", "wj", "p1", "--filter", "tool_calls")
        assert bad.code == 2 and bad.err.startswith("helix-runner: error: unknown event kind 'tool_calls'")

        # The raw CLI output of the phase replays to the same CLI-derived lines (without times:
        # raw output has none, and durations measured by the server are not in it).
        (recording,) = (runner.data_dir / "recordings" / "wj").iterdir()
        raw = await asyncio.to_thread(run_verb, "replay", str(recording), "--timed")
        assert raw.code == 0, raw.err
        assert "raw CLI output has no timestamps" in raw.err and "last turn result success" in raw.err
        same_kinds = ("tool_call_started", "assistant_text", "api_retry", "session_init")
        raw_details = [(e["kind"], e["detail"]) for e in parsed(raw.lines) if e["kind"] in same_kinds]
        assert raw_details == [d for d in details if d[0] in same_kinds]


async def test_watch_re_attaches_after_a_dropped_connection(claude_binary, scripted_api, runner_factory):
    api = scripted_api(
        [Reply.tool_use("Bash", {"command": f"sleep 0.3; echo {i}"}) for i in range(4)] + [Reply.text("done")]
    )
    async with runner_factory(api) as runner, TcpProxy(runner.server.port) as proxy:
        phase = PhaseCall(runner.stub, "rj", "p1", str(runner.workdir), allowed_tools=["Bash"])
        await phase.wait_for(lambda e: True)  # the phase exists (its first event arrived) before watch asks
        watching = asyncio.create_task(helix(proxy.address, "watch", "rj", "p1"))
        first = await phase.wait_for(lambda e: e.HasField("tool_call_finished"))
        proxy.drop()
        await phase.wait_for(lambda e: e.HasField("tool_call_finished"), after=first.sequence)
        proxy.drop()
        result = await phase.finish()
        watched = await watching
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert watched.code == 0, watched.err
    assert "connection lost" in watched.err and "re-attaching after sequence" in watched.err
    seqs = [int(e["seq"]) for e in parsed(watched.lines)]
    assert seqs == list(range(1, result.last_sequence + 1))  # nothing missed, nothing twice
    assert watched.lines[-2] == "SUCCEEDED: completed"

"""Every real transcript of the corpus, replayed through PhaseStream, against facts checkable by hand.

``VENDORED`` names the transcripts kept in ``tests/fixtures/corpus/real/`` (all local captures and a
few real-API sessions); the rest of ``FACTS`` is checked when the full external corpus is there
(see ``conftest.py``) and skipped with a reason otherwise.

Each expectation below can be verified by reading the file (``grep -c '"type":"result"'``, the
``tool_use`` names in order, which ``tool_result`` has ``"is_error":true``, the last result's
``total_cost_usd``). No file in ``real/`` is broken on purpose: all parse with zero parse errors.
Several are *incomplete* on purpose (a log cut before the final ``result``): those are marked
``computed_only``. Files named ``*.both.jsonl`` / ``*.stdin.jsonl`` are not CLI stdout.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
from msgspec.structs import replace
from support.corpus import CORPUS_ENV, external_corpus

from helix_runner.domain.events import (
    ApiError,
    ApiRetry,
    Compaction,
    ControlRequest,
    ControlResponse,
    CostUpdate,
    HookEvent,
    ParseError,
    PermissionDenied,
    SessionInit,
    TaskEvent,
    TaskEventKind,
    Thinking,
    ToolCallFinished,
    Unknown,
    UserMessage,
)
from helix_runner.domain.tool_tracker import ToolCallStatus

# (subtype, is_error, api_error_status, terminal_reason, num_turns) per result line, in order.
R = tuple[str, bool, int | None, str, int]
OK3: R = ("success", False, None, "completed", 3)


@dataclass
class Facts:
    results: list[R]
    reported_usd: float | None
    calls: list[str] | Counter | None = None  # ordered names (small files) or counts (large ones)
    failed: list[str] = field(default_factory=list)  # names of calls whose result had is_error, in order
    unfinished: list[str] = field(default_factory=list)
    orphans: int = 0  # tool results whose tool_use line is not in the file
    kinds: dict[type, int] = field(default_factory=dict)  # counts of selected event payload kinds
    computed_equals_reported: bool = True
    denials: int | None = None  # permission_denials of the last result


FACTS: dict[str, Facts] = {
    "localcli-01-simple.jsonl": Facts([("success", False, None, "completed", 1)], 0.004816, []),
    "localcli-02-tools.jsonl": Facts([OK3], 0.017455199999999997, ["Bash", "Read"]),
    "localcli-03-parallel.jsonl": Facts([OK3], 0.0114176, ["Read", "Glob"], failed=["Glob"]),
    "localcli-04-toolerror.jsonl": Facts([OK3], 0.0168752, ["Read", "Bash"], failed=["Read", "Bash"]),
    "localcli-05-denied.jsonl": Facts(
        [("success", False, None, "completed", 2)],
        0.0107376,
        ["Write"],
        failed=["Write"],
        kinds={PermissionDenied: 1},
        denials=1,
    ),
    "localcli-06-maxturns.jsonl": Facts(
        [("error_max_turns", True, None, "max_turns", 3)], 0.0114576, ["Bash", "Bash"]
    ),
    "localcli-07-thinking.jsonl": Facts(
        [("success", False, None, "completed", 2)],
        0.012077599999999999,
        ["Bash"],
        kinds={Thinking: 2, Unknown: 2},  # two system/thinking_tokens lines
    ),
    "localcli-08-partial.jsonl": Facts([OK3], 0.017455199999999997, ["Bash", "Read"]),
    "localcli-09-subagent.jsonl": Facts(
        [("success", False, None, "completed", 2), ("success", False, None, "completed", 1)],
        0.027860799999999998,
        ["Agent", "Glob"],
        kinds={TaskEvent: 4, Unknown: 2, SessionInit: 2},
    ),
    "localcli-10-apierror400.jsonl": Facts(
        [("success", True, 400, "prompt_too_long", 1)], 0.0, [], kinds={ApiError: 1}
    ),
    "localcli-11-apierror500.jsonl": Facts(
        [("success", True, 500, "api_error", 1)], 0.0, [], kinds={ApiRetry: 2, ApiError: 1}
    ),
    "localcli-12-overloaded.jsonl": Facts(
        [("success", True, 529, "api_error", 1)], 0.0, [], kinds={ApiRetry: 1, ApiError: 1}
    ),
    "localcli-13-auth401.jsonl": Facts([], None, [], kinds={ApiRetry: 7}),
    "localcli-14-hooks.jsonl": Facts([OK3], 0.017455199999999997, ["Bash", "Read"], kinds={HookEvent: 4}),
    "localcli-15-bigoutput.jsonl": Facts(
        [("success", False, None, "completed", 2)], 0.010777600000000002, ["Bash"]
    ),
    "localcli-16-ctl-permissions.jsonl": Facts(
        [
            OK3,
            ("success", False, None, "completed", 1),
            ("error_during_execution", True, None, "aborted_streaming", 2),
        ],
        0.0278162,
        ["Bash", "Write"],
        failed=["Write"],
        kinds={ControlResponse: 4, ControlRequest: 3, UserMessage: 2, SessionInit: 3},
        denials=0,
    ),
    "localcli-17-ctl-queue.jsonl": Facts(
        [("success", False, None, "completed", 1)] * 2, 0.010008, [], kinds={ControlResponse: 1}
    ),
    "localcli-18-ctl-no-initialize.jsonl": Facts([OK3], 0.017455199999999997, ["Bash", "Read"]),
    "localcli-19-ctl-stdin-closed-early.jsonl": Facts(
        [OK3], 0.0171752, ["Bash", "Write"], failed=["Bash", "Write"], kinds={ControlResponse: 1}, denials=2
    ),
    "localcli-20-ctl-compact.jsonl": Facts(
        [
            ("success", False, None, "completed", 1),
            ("success", False, None, "", 0),
            ("success", False, None, "completed", 1),
        ],
        0.020835199999999998,
        [],
        kinds={Compaction: 2, UserMessage: 2},
    ),
    "localcli-21-ctl-unknown-subtype.jsonl": Facts(
        [("success", False, None, "completed", 1)], 0.004816, [], kinds={ControlResponse: 1}
    ),
    "localcli-22-ctl-bad-stdin-json.jsonl": Facts([], None, [], kinds={ControlResponse: 1}),
    "localcli-23-ctl-hook-breakpoint.jsonl": Facts(
        [OK3], 0.017455199999999997, ["Bash", "Read"], failed=["Read"], kinds={ControlRequest: 2}, denials=1
    ),
    "localcli-24-edit-glob-grep.jsonl": Facts(
        [("success", False, None, "completed", 8)],
        0.010380000000000002,
        ["Read", "Write", "Edit", "Bash", "Bash", "Glob", "Grep"],
        failed=["Bash", "Glob", "Grep"],
    ),
    "localcli-25-edit-glob-grep-partial.jsonl": Facts(
        [("success", False, None, "completed", 8)],
        0.010380000000000002,
        ["Read", "Write", "Edit", "Bash", "Bash", "Glob", "Grep"],
        failed=["Bash", "Glob", "Grep"],
    ),
    "localcli-26-thinking-partial.jsonl": Facts(
        [("success", False, None, "completed", 1)], 0.0013800000000000002, [], kinds={Thinking: 1, Unknown: 1}
    ),
    "localcli-27-maxturns-loop.jsonl": Facts(
        [("error_max_turns", True, None, "max_turns", 3)], 0.0029000000000000002, ["Bash", "Bash"]
    ),
    "localcli-28-ratelimit429-recovered.jsonl": Facts(
        [("success", False, None, "completed", 1)], 0.0013800000000000002, [], kinds={ApiRetry: 2}
    ),
    # Four lines from different captures: two results with num_turns -1 and no modelUsage, and an
    # assistant line of another session, so the computed figure cannot match the reported one.
    "rustclaudecodes-1.jsonl": Facts(
        [("success", False, None, "", -1)] * 2, 0.0003912, [], computed_equals_reported=False
    ),
    # Re-compacted fixture: total_cost_usd (0.247) exceeds the one model's costUSD (0.228).
    "gleamsdk-1.jsonl": Facts(
        [("success", False, None, "", 2)], 0.24722425, ["Bash"], computed_equals_reported=False
    ),
    "hivemind-1.jsonl": Facts(
        [("success", False, None, "", 185)],
        1.2734612500000004,
        Counter(Bash=40, TodoWrite=13, Read=5, Write=4, Glob=3, WebSearch=2, Edit=2),
        failed=["Bash", "Bash", "Bash"],
        unfinished=["Read", "Read"],
    ),
    "hivemind-2.jsonl": Facts(
        [("success", False, None, "", 68)],
        2.593711449999998,
        Counter(Bash=23, Grep=12, Read=11, TodoWrite=10, Edit=9, BashOutput=1, Glob=1),
        unfinished=["Read"] * 5,
    ),
    # Two consecutive runs in one file: the second result's running total is the latest.
    "hivemind-3.jsonl": Facts(
        [("success", False, None, "", 68), ("success", False, None, "", 111)],
        2.1948016999999993,
        Counter(Bash=90, TodoWrite=26, Read=25, Edit=18, Grep=12, BashOutput=1, Glob=1),
        failed=["Bash"] * 3,
        unfinished=["Read"] * 5 + ["Bash"] + ["Read"] * 4,
        orphans=4,
    ),
    "hivemind-4.jsonl": Facts(
        [("success", False, None, "", 45), ("success", False, None, "", 24)],
        0.5873877500000001,
        Counter(Bash=39, TodoWrite=12, Read=9, Write=4, Edit=1, Grep=1),
        failed=["Bash"],
        unfinished=["Read"] * 5 + ["Write", "Read", "Write", "Bash"],
    ),
    "hivemind-5.jsonl": Facts(
        [],
        None,
        Counter(Bash=39, TodoWrite=7, Grep=4, Read=1, BashOutput=1, KillShell=1),
        failed=["Bash", "Read", "Bash", "Bash", "Bash", "KillShell"],
        unfinished=["TodoWrite", "Bash"],
    ),
    "hivemind-6.jsonl": Facts(
        [("success", False, None, "", 120)],
        0.9644162999999997,
        Counter(Bash=22, Read=12, TodoWrite=8, Glob=6, Edit=4, WebFetch=2, Task=1),
        failed=["Read"],
        unfinished=["Bash"] + ["Read"] * 5 + ["Bash", "Bash"],
    ),
    # The result in the middle belongs to the first run; the second run was cut before its result,
    # so our computed cost also counts the usage seen after that result.
    "hivemind-7.jsonl": Facts(
        [("success", False, None, "", 120)],
        0.9644162999999997,
        Counter(Bash=27, Read=14, TodoWrite=8, Glob=6, Edit=4, WebFetch=4, Task=1),
        failed=["Read"],
        unfinished=["Bash"] + ["Read"] * 5 + ["Bash"] * 3 + ["Read"] * 2,
        computed_equals_reported=False,
    ),
    "hivemind-8.jsonl": Facts(
        [],
        None,
        Counter(Bash=33, TodoWrite=12, Read=6, Edit=6, Write=4, Glob=3),
        failed=["Read"] + ["Bash"] * 8,
        unfinished=["Read"],
        orphans=7,
    ),
}


# The vendored subset: every local capture, the two small third-party fixtures, and the real-API
# sessions the named tests below use (two models and web search; no result; a Task subagent).
VENDORED = {name for name in FACTS if name.startswith(("localcli-", "gleamsdk-", "rustclaudecodes-"))} | {
    "hivemind-1.jsonl",
    "hivemind-5.jsonl",
    "hivemind-6.jsonl",
}


def test_the_vendored_corpus_is_complete(vendored_transcripts):
    assert sorted(vendored_transcripts) == sorted(VENDORED)


def test_every_transcript_has_facts(real_transcripts):
    assert set(real_transcripts) <= set(FACTS), "add facts for new corpus files"
    if external_corpus() is not None:
        assert sorted(real_transcripts) == sorted(FACTS), "drop facts of files the corpus no longer has"


@pytest.mark.parametrize("name", sorted(FACTS))
def test_transcript(name, real_transcripts, replay):
    if name not in VENDORED and name not in real_transcripts:
        pytest.skip(f"{name} is not vendored; set {CORPUS_ENV} to the full corpus to check it")
    facts = FACTS[name]
    stream, events = replay(real_transcripts[name], include_partial_messages="partial" in name)

    assert stream.parse_error_count == 0
    assert not [e for e in events if isinstance(e.payload, ParseError)]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))

    results = [
        (r.subtype, r.is_error, r.api_error_status, r.terminal_reason, r.num_turns) for r in stream.results
    ]
    assert results == facts.results

    calls = stream.tools.calls
    names = [c.name for c in calls]
    if isinstance(facts.calls, Counter):
        assert Counter(names) == facts.calls
    elif facts.calls is not None:
        assert names == facts.calls
    assert [c.name for c in calls if c.status is ToolCallStatus.FAILED] == facts.failed
    assert [c.name for c in calls if c.status is ToolCallStatus.UNFINISHED] == facts.unfinished
    assert not [c for c in calls if c.status in (ToolCallStatus.RUNNING, ToolCallStatus.HELD)]
    assert stream.tools.orphan_results == facts.orphans
    finished = [e.payload for e in events if isinstance(e.payload, ToolCallFinished)]
    assert len(finished) == len(calls) - len(facts.unfinished) + facts.orphans
    stats = {s.name: s for s in stream.tools.stats()}
    assert sum(s.count for s in stats.values()) == len(calls)
    assert sum(s.failures for s in stats.values()) == len(facts.failed)
    assert sum(s.unfinished for s in stats.values()) == len(facts.unfinished)

    kinds = Counter(type(e.payload) for e in events)
    for kind, count in facts.kinds.items():
        assert kinds[kind] == count, kind.__name__

    cost = stream.cost
    assert cost.reported_usd == facts.reported_usd
    assert cost.computed_only is (not facts.results)
    assert cost.unpriced_models == ()
    if facts.computed_equals_reported and facts.reported_usd is not None:
        assert cost.computed_usd == pytest.approx(facts.reported_usd, rel=1e-9, abs=1e-12)
        assert cost.difference_usd == pytest.approx(0.0, abs=1e-9)
    if facts.denials is not None:
        assert len(stream.results[-1].permission_denials) == facts.denials


def test_localcli_04_which_calls_errored(real_transcripts, replay):
    # Read of a missing file and `exit 3` both come back with is_error true
    # (docs/claude-cli-protocol.md §2.4).
    stream, events = replay(real_transcripts["localcli-04-toolerror.jsonl"])
    finished = [e.payload for e in events if isinstance(e.payload, ToolCallFinished)]
    assert [(f.name, f.is_error, f.content_preview) for f in finished] == [
        ("Read", True, "File does not exist. Note: your current working directory is /home/dev/project."),
        ("Bash", True, "Exit code 3"),
    ]
    assert finished[1].structured_result_json == '"Error: Exit code 3"'


def test_localcli_09_latest_result_wins_not_the_sum(real_transcripts, replay):
    stream, events = replay(real_transcripts["localcli-09-subagent.jsonl"])
    assert [r.total_cost_usd for r in stream.results] == [0.027860799999999998] * 2
    assert [r.result_index for r in stream.results] == [0, 1]
    assert stream.cost.reported_usd == 0.027860799999999998  # not 0.0557216
    # The subagent's Glob call is attributed to the Agent call that spawned it.
    agent, glob = stream.tools.calls
    assert glob.parent_tool_use_id == agent.tool_use_id == "toolu_01cef3ab93b59c4bf29eb7ca29"
    assert glob.agent_id == "ac11929b189832fbe"
    tasks = [e.payload for e in events if isinstance(e.payload, TaskEvent)]
    assert [t.kind for t in tasks] == [
        TaskEventKind.STARTED,
        TaskEventKind.PROGRESS,
        TaskEventKind.UPDATED,
        TaskEventKind.NOTIFICATION,
    ]
    assert tasks[2].status == "completed" and tasks[3].summary == "There is 1 .txt file (notes.txt)."


def test_hivemind_5_ends_without_result_so_the_cost_is_computed_only(real_transcripts, replay):
    stream, _ = replay(real_transcripts["hivemind-5.jsonl"])
    cost = stream.cost
    assert stream.results == []
    assert cost.computed_only and cost.reported_usd is None and cost.difference_usd is None
    # Sonnet 4.5 usage summed over the 86 assistant lines, one count per message id.
    assert [m.model for m in cost.models] == ["claude-sonnet-4-5-20250929"]
    assert cost.computed_usd == pytest.approx(0.81892275, rel=1e-9)


def test_localcli_06_max_turns_has_errors_and_no_result_text(real_transcripts, replay):
    stream, _ = replay(real_transcripts["localcli-06-maxturns.jsonl"])
    (result,) = stream.results
    assert result.errors == ("Reached maximum number of turns (2)",)
    assert result.result_text == ""


def test_localcli_10_success_subtype_with_is_error_is_an_api_error(real_transcripts, replay):
    stream, events = replay(real_transcripts["localcli-10-apierror400.jsonl"])
    (result,) = stream.results
    assert (result.subtype, result.is_error, result.api_error_status) == ("success", True, 400)
    (error,) = [e.payload for e in events if isinstance(e.payload, ApiError)]
    assert (error.error, error.api_error_status) == ("invalid_request", 400)
    assert error.message.startswith("Prompt is too long")


def test_hivemind_1_prices_both_models_like_the_cli(real_transcripts, replay):
    stream, _ = replay(real_transcripts["hivemind-1.jsonl"])
    by_model = {m.model: m for m in stream.cost.models}
    sonnet = by_model["claude-sonnet-4-5-20250929"]
    assert sonnet.tokens.web_search_requests == 2
    assert sonnet.computed_usd == pytest.approx(sonnet.reported_usd, rel=1e-9) == pytest.approx(1.26568625)
    assert by_model["claude-haiku-4-5-20251001"].computed_usd == pytest.approx(0.007775)


def test_hivemind_6_subagent_calls_point_at_their_task(real_transcripts, replay):
    stream, _ = replay(real_transcripts["hivemind-6.jsonl"])
    (task,) = [c for c in stream.tools.calls if c.name == "Task"]
    sub = [c for c in stream.tools.calls if c.parent_tool_use_id]
    assert len(sub) == 10 and {c.parent_tool_use_id for c in sub} == {task.tool_use_id}


def test_localcli_16_control_lines(real_transcripts, replay):
    _, events = replay(real_transcripts["localcli-16-ctl-permissions.jsonl"])
    requests = [e.payload for e in events if isinstance(e.payload, ControlRequest)]
    assert [(r.subtype, r.tool_name) for r in requests] == [
        ("hook_callback", "Bash"),
        ("can_use_tool", "Bash"),
        ("can_use_tool", "Write"),
    ]
    assert requests[0].request["callback_id"] == "hook_0"  # what the supervisor answers with
    responses = [e.payload for e in events if isinstance(e.payload, ControlResponse)]
    assert [r.request_id for r in responses] == ["req_1_drv", "req_2_drv", "req_3_drv", "req_4_drv"]
    assert all(r.success for r in responses)
    users = [e.payload for e in events if isinstance(e.payload, UserMessage)]
    assert users[0].is_replay and users[1].text == "[Request interrupted by user]"


def test_localcli_21_control_error_response(real_transcripts, replay):
    _, events = replay(real_transcripts["localcli-21-ctl-unknown-subtype.jsonl"])
    (response,) = [e.payload for e in events if isinstance(e.payload, ControlResponse)]
    assert (response.request_id, response.success, response.error_code) == (
        "r2",
        False,
        "unsupported_request",
    )


def test_localcli_15_big_result_is_bounded(real_transcripts, replay):
    _, events = replay(real_transcripts["localcli-15-bigoutput.jsonl"])
    (finished,) = [e.payload for e in events if isinstance(e.payload, ToolCallFinished)]
    # The CLI itself replaced the 300 KB output by a 2 KB <persisted-output> preview
    # (docs/claude-cli-protocol.md §2.4) ...
    assert finished.content_preview.startswith("<persisted-output>")
    assert (finished.content_bytes, finished.content_truncated) == (2222, False)
    # ... but its structured tool_use_result still carries all of stdout: cut to 16 KiB.
    assert len(finished.structured_result_json.encode()) == 16 * 1024
    assert finished.structured_result_truncated


def test_every_file_parses_identically_in_tiny_chunks(real_transcripts, replay):
    # Framing must not depend on read sizes: 7-byte reads give the same payloads as whole files.
    for name in ("localcli-02-tools.jsonl", "localcli-08-partial.jsonl", "localcli-16-ctl-permissions.jsonl"):
        _, whole = replay(real_transcripts[name], chunk=1 << 30, include_partial_messages=True)
        _, tiny = replay(real_transcripts[name], chunk=7, include_partial_messages=True)
        assert _payloads(tiny) == _payloads(whole)


def _payloads(events) -> list:
    """Payloads without what depends on read timing (durations, throttled cost updates)."""
    out = []
    for e in events:
        if isinstance(e.payload, CostUpdate):
            continue
        out.append(
            replace(e.payload, duration_ns=None) if isinstance(e.payload, ToolCallFinished) else e.payload
        )
    return out


def test_hand_edited_examples_parse_and_pair_what_they_can(corpus_dir, replay):
    # examples/ holds third-party fixtures trimmed by hand (examples/SOURCES.md): they still parse
    # cleanly, and tool results whose tool_use was trimmed away are counted as orphans, not lost.
    examples = corpus_dir / "examples"
    for path in sorted(examples.glob("*.jsonl")):
        stream, _ = replay(path)
        assert stream.parse_error_count == 0, path.name
    stream, _ = replay(examples / "rustclaudecodes-toolmsgs-1.jsonl")
    assert [(c.name, c.status) for c in stream.tools.calls] == [
        ("Bash", ToolCallStatus.FAILED),
        ("Bash", ToolCallStatus.SUCCEEDED),
        ("Bash", ToolCallStatus.FAILED),
    ]
    stream, events = replay(examples / "rustclaudecodes-toolmsgs-2.jsonl")
    assert [(c.name, c.status) for c in stream.tools.calls] == [("Bash", ToolCallStatus.UNFINISHED)]
    assert stream.tools.orphan_results == 3
    finished = [e.payload for e in events if isinstance(e.payload, ToolCallFinished)]
    assert finished[0].is_error and finished[0].content_preview.startswith(
        "<tool_use_error>InputValidationError"
    )

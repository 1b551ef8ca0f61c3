"""Phases that outlive their replica (issue 24), proved on three `helix-runner serve` processes
sharing one PostgreSQL database and one workspace volume, with the real Claude Code CLI.

* A rolling restart of all three (SIGTERM, wait for the exit, start again), 20 phases running:
  none ends INTERRUPTED, every phase finishes its work (each of its tools ran once, in order),
  every caller's stream is one gap-free sequence equal to what WatchPhase replays, and the cost is
  the exact sum of the attempts', each attempt naming the replica that ran it.
* `kill -9` of one replica in the middle of its phases: they resume on the others (a new attempt
  `--resume`d, "resumed after replica <id> was lost") within the lease plus a stated bound.
* A phase held at a breakpoint is moved by a drain and then approved (and, separately, approved
  while it moves): the tool runs exactly once.

The contract under test (BRIEF-handover-now.md, docs/scale-out.md "Hand-over"): the stream of a
RunPhase or WatchPhase caller on the draining replica ends with UNAVAILABLE and an ErrorInfo
PHASE_MOVED (job_id, phase_id, after_sequence, from_replica) plus a RetryInfo; WatchPhase after
that sequence, on any replica, gives the rest. The callers here use the repository's Python
client, which follows that by itself, through one round-robin channel over the three replicas
(what a Kubernetes Service gives); the breakpoint test reads the raw contract.

The phases' model is the scripted Messages API of each replica (`--offline-script`). A phase
moved to another replica is answered by *that* replica's stand-in, so the script is stateless
(``support.cluster.stepped_script``): each step is chosen by what the conversation already holds,
never by counting requests.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import psycopg
import pytest
from google.rpc import error_details_pb2, status_pb2
from helix_runner_client import RunnerClient
from helix_runner_client import pb as cpb
from support.cluster import (
    SERVICE_OPTIONS,
    SHORT,
    Replica,
    cluster,
    follow,
    service_target,
    shared_workspace,
    stepped_script,
)
from support.processes import wait_gone
from support.runner_server import collect

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.store.protocol import sweep_interval_seconds

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

# The hand-over bound (how long a drain waits for a tool boundary before it stops the CLI anyway,
# H1's `handover_wait_seconds`) and the drain's whole budget. Every step's tool is shorter than
# the bound, so each hand-over happens at a boundary and no tool is cut; every phase has more work
# left than the drain's budget, so a drain that waited for phases to finish (the code before the
# hand-over) ends them INTERRUPTED instead.
HANDOVER_WAIT_S = 10
DRAIN_GRACE_S = 20
ENV = {
    "HELIX_RUNNER_HANDOVER_WAIT_SECONDS": str(HANDOVER_WAIT_S),
    "HELIX_RUNNER_DRAIN_GRACE_SECONDS": str(DRAIN_GRACE_S),
}
# A replica's exit after SIGTERM: the drain's budget plus the server's own shutdown.
STOP_LIMIT_S = DRAIN_GRACE_S + 30

FINAL = {res.PHASE_STATUS_SUCCEEDED, res.PHASE_STATUS_FAILED, res.PHASE_STATUS_CANCELLED,
         res.PHASE_STATUS_INTERRUPTED}  # fmt: skip
MOVED_FROM = "moved from replica {} (draining)"
RESUMED_AFTER = "resumed after replica {} was lost"


def steps_ran(workdir: Path) -> list[int]:
    path = workdir / "steps.txt"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def add_usage(total: dict[str, float], cost) -> None:
    for field in cost.tokens.DESCRIPTOR.fields:  # every kind of token TokenUsage counts
        total[field.name] = total.get(field.name, 0) + getattr(cost.tokens, field.name)
    total["computed_usd"] = total.get("computed_usd", 0.0) + cost.computed_usd


def move_reasons(result, events, number: int) -> str:
    """Every text that may say why attempt ``number`` (1-based, > 1) followed the one before: the
    reason the previous attempt ended with, this attempt's reason, and the messages of the control
    events (RETRY_SCHEDULED, ATTEMPT_STARTED) between the two attempts' first events."""
    before, after = result.attempts[number - 2], result.attempts[number - 1]
    between = [
        e.control.message
        for e in events
        if e.HasField("control") and before.first_sequence < e.sequence <= after.first_sequence
    ]
    return "\n".join([before.reason, after.reason, *between])


def check_attempts(result, events, where: str) -> list[str]:
    """Every attempt names its replica; each attempt after the first says why it followed the one
    before ("moved from replica X (draining)" or "resumed after replica X was lost", X the replica
    of the attempt before); the phase's cost is exactly the sum of its attempts' costs. Returns the
    replicas the phase left, in order."""
    attempts = list(result.attempts)
    assert attempts, where
    replicas = [a.replica_id for a in attempts]
    assert all(replicas), (where, replicas)
    moved_from = []
    for number, before in enumerate(attempts[:-1], start=1):
        said = move_reasons(result, events, number + 1)
        assert (
            MOVED_FROM.format(before.replica_id) in said or RESUMED_AFTER.format(before.replica_id) in said
        ), (where, number + 1, said)
        moved_from.append(before.replica_id)
    summed: dict[str, float] = {}
    for a in attempts:
        add_usage(summed, a.cost)
    phase: dict[str, float] = {}
    add_usage(phase, result.cost)
    assert {k: v for k, v in phase.items() if k != "computed_usd"} == {
        k: v for k, v in summed.items() if k != "computed_usd"
    }, where
    assert phase["computed_usd"] == pytest.approx(summed["computed_usd"], rel=1e-9, abs=1e-12), where
    assert phase["output_tokens"] > 0, where
    return moved_from


def same_events(client_events, events) -> bool:
    """Whether the client's events (betterproto2 messages) are the server's ``events``: compared
    as the client decodes them (its timestamps keep microseconds, a ``datetime``)."""
    return list(client_events) == [cpb.StreamEvent.parse(e.SerializeToString()) for e in events]


def gap_free(events) -> bool:
    return [e.sequence for e in events] == list(range(1, len(events) + 1))


def status_details(error: grpc.aio.AioRpcError):
    """The ErrorInfo and the RetryInfo (or None) of a failed call."""
    (raw,) = [v for k, v in error.trailing_metadata() or () if k == "grpc-status-details-bin"]
    info, retry = None, None
    for detail in status_pb2.Status.FromString(raw).details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
    return info, retry


async def all_phases(replica: Replica, job_ids: list[str]) -> dict[str, res.Phase]:
    phases = {}
    for job_id in job_ids:
        job = (await replica.stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
        (phases[job_id],) = job.phases
    return phases


async def phase_owners(database_url: str) -> dict[str, int]:
    """How many phases each replica owns now (the phases table's owner column)."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
        rows = await (await db.execute("SELECT owner_id, count(*) FROM phases GROUP BY owner_id")).fetchall()
    return {owner: n for owner, n in rows}


async def spread_ready(channel: grpc.aio.Channel) -> None:
    """Waits until the round-robin channel is connected, then lets its other subchannels connect
    too (a few calls and a moment), so that the calls after it rotate over all three replicas."""
    await asyncio.wait_for(channel.channel_ready(), 30)
    for _ in range(6):
        await channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10)
        await asyncio.sleep(0.1)


# -- a rolling restart --------------------------------------------------------------------------

PHASES = 20
STEPS = 12
STEP_SLEEP_S = 4


@pytest.mark.timeout(900)  # several real CLIs and restarts on a shared 2-core machine
async def test_a_rolling_restart_of_all_three_moves_twenty_phases_and_interrupts_none(
    claude_binary, postgres_url, tmp_path
):
    script = tmp_path / "script.json"
    stepped_script(STEPS, STEP_SLEEP_S).save(script)
    shared = shared_workspace(tmp_path / "shared")  # the workspace volume every replica reaches
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script), env=ENV, fixed_ports=True,
                       workspace_root=shared) as replicas:  # fmt: skip
        target = service_target(replicas)
        channel = grpc.aio.insecure_channel(target, options=SERVICE_OPTIONS)
        await spread_ready(channel)
        async with RunnerClient(channel=channel) as client:
            job_ids = [f"roll-{i:02d}" for i in range(PHASES)]
            started = {job_id: asyncio.Event() for job_id in job_ids}

            async def run(job_id: str):
                workdir = shared / job_id
                workdir.mkdir()
                request = cpb.RunPhaseRequest(job_id=job_id, phase_id="p1", prompt="go", working_dir=str(workdir),
                                              options=cpb.PhaseOptions(allowed_tools=["Bash"]))  # fmt: skip
                stream = client.run_phase(request)
                events = []
                try:
                    async for event in stream:
                        events.append(event)
                        if event.tool_call_started is not None:
                            started[job_id].set()
                finally:
                    started[job_id].set()  # a failed stream must not hold the restarts up
                return events, stream

            runs = {job_id: asyncio.create_task(run(job_id)) for job_id in job_ids}
            try:
                async with asyncio.timeout(180):  # every phase is in its first tool call
                    await asyncio.gather(*(e.wait() for e in started.values()))
                assert not [j for j, t in runs.items() if t.done()], "a phase ended before the restarts"
                owners = await phase_owners(postgres_url)
                assert set(owners) == {r.replica_id for r in replicas}, owners  # each replica runs some

                restarted_at = time.monotonic()
                for replica in replicas:  # one at a time, as a rolling deploy
                    code = await replica.stop(STOP_LIMIT_S)
                    assert code == 0, (replica.name, replica.logs()[-4000:])
                    await replica.start_again()
                print(f"three restarts in {time.monotonic() - restarted_at:.1f} s")

                outcomes = {}
                async with asyncio.timeout(600):
                    for job_id, task in runs.items():
                        outcomes[job_id] = await task
            finally:
                for task in runs.values():
                    task.cancel()
                await asyncio.gather(*runs.values(), return_exceptions=True)

        # The whole history from a replica that restarted, against what each caller saw.
        moved_from: list[str] = []
        followed = 0
        phases = await all_phases(replicas[0], job_ids)
        for job_id, (events, stream) in outcomes.items():
            result = stream.result
            assert result.status == cpb.PhaseStatus.SUCCEEDED, (job_id, result.status, result.reason)
            assert steps_ran(shared / job_id) == list(range(1, STEPS + 1)), job_id  # each tool once, in order
            assert gap_free(events), job_id  # one gap-free stream
            assert result.last_sequence == events[-1].sequence, job_id
            watched, watched_result = await collect(
                replicas[1].stub.WatchPhase(pb.WatchPhaseRequest(job_id=job_id, phase_id="p1"), timeout=30)
            )
            assert same_events(events, watched), job_id  # the same events
            assert phases[job_id].status == res.PHASE_STATUS_SUCCEEDED, job_id
            assert phases[job_id].result == watched_result, job_id
            moved_from += check_attempts(watched_result, watched, job_id)
            followed += bool(stream.moves)
        print(f"{len(moved_from)} hand-overs; {followed} of {PHASES} callers followed a move")
        # Every replica was drained with phases on it, and handed them over.
        assert {r.replica_id for r in replicas} <= set(moved_from), moved_from
        assert followed > 0
        statuses = [p.status for p in (await all_phases(replicas[2], job_ids)).values()]
        assert statuses.count(res.PHASE_STATUS_INTERRUPTED) == 0 and set(statuses) == {
            res.PHASE_STATUS_SUCCEEDED
        }


# -- kill -9 -------------------------------------------------------------------------------------

# The stated bound: the dead replica's lease runs out at most one lease after its last heartbeat,
# a survivor sweeps every third of a lease (docs/scale-out.md, "Dead-replica takeover"), and the
# resumed attempt's CLI is started and sends its first event within RESUME_START_S. A short lease
# keeps the test from waiting the default 15 s; the slack is for a loaded 2-core machine.
LEASE_S = 3.0
RESUME_START_S = 15.0
RESUME_BOUND_S = LEASE_S + sweep_interval_seconds(LEASE_S) + RESUME_START_S
RESUME_SLACK_S = 15.0
KILLED_PHASES = 3
KILL_STEPS = 6


@pytest.mark.timeout(420)  # several real CLIs and restarts on a shared 2-core machine
async def test_the_phases_of_a_replica_killed_mid_run_resume_on_the_others(
    claude_binary, postgres_url, tmp_path
):
    script = tmp_path / "script.json"
    stepped_script(KILL_STEPS, 3).save(script)
    shared = shared_workspace(tmp_path / "shared")
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script), "--replica-lease-seconds",
                       str(LEASE_S), env=ENV, workspace_root=shared) as (a, b, c):  # fmt: skip
        job_ids = [f"kill-{i}" for i in range(KILLED_PHASES)]
        runs, watches = {}, {}
        for job_id in job_ids:
            (shared / job_id).mkdir()
            request = pb.RunPhaseRequest(job_id=job_id, phase_id="p1", prompt="go", working_dir=str(shared / job_id),
                                         options=pb.PhaseOptions(allowed_tools=["Bash"]))  # fmt: skip
            runs[job_id] = follow(a.stub.RunPhase(request, timeout=300))
        # All three past their first step (a finished tool call, so the session has something to
        # resume) and in the middle of the next one on A, watched from C.
        for job_id in job_ids:
            finished = await runs[job_id].wait_for(lambda e: e.HasField("tool_call_finished"))
            await runs[job_id].wait_for(lambda e: e.HasField("tool_call_started"), after=finished.sequence)
            watches[job_id] = follow(
                c.stub.WatchPhase(pb.WatchPhaseRequest(job_id=job_id, phase_id="p1"), timeout=300)
            )
            await watches[job_id].wait_for(lambda e: e.HasField("tool_call_started"))
        before = {job_id: runs[job_id].events[-1].sequence for job_id in job_ids}
        scope = a.scope_processes()

        await a.kill()
        killed_at = time.monotonic()
        # The phases' processes end with it (containment); what their tools did stays on the volume.
        assert await asyncio.to_thread(wait_gone, scope, 10.0) == []
        ran_before = {job_id: steps_ran(shared / job_id) for job_id in job_ids}

        def resumed(e) -> bool:
            return (
                e.HasField("control")
                and e.control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED
                and (e.control.attempt > 1)
            )

        took = {}
        for job_id in job_ids:
            left = RESUME_BOUND_S + RESUME_SLACK_S - (time.monotonic() - killed_at)
            started = await watches[job_id].wait_for(resumed, max(left, 1.0), after=before[job_id])
            took[job_id] = time.monotonic() - killed_at
            assert started.control.resumed_session_id, job_id  # --resume, not the prompt again
        print("killed -> resumed attempt seen on C after " + ", ".join(f"{t:.1f} s" for t in took.values())
              + f" (bound {RESUME_BOUND_S:.0f} s)")  # fmt: skip

        for job_id in job_ids:
            events, result = await watches[job_id].finish(180)
            assert watches[job_id].error is None, job_id
            assert result.status == res.PHASE_STATUS_SUCCEEDED, (job_id, result.reason)
            assert gap_free(events) and result.last_sequence == events[-1].sequence, job_id
            # The RunPhase caller of the dead replica saw a prefix, then lost the connection.
            run = runs[job_id]
            await run.finish(30)
            assert run.error is not None and run.error.code() == grpc.StatusCode.UNAVAILABLE, job_id
            assert events[: len(run.events)] == run.events, job_id
            # What ran before the kill stays; the adopter goes on from the last state saved (the
            # transcript mirrored at a turn boundary), so steps after it may run again, but none
            # is skipped: the steps after the kill are consecutive, from at most the first one
            # that had not finished, to the last.
            ran, done_before = steps_ran(shared / job_id), ran_before[job_id]
            assert ran[: len(done_before)] == done_before, (job_id, ran, done_before)
            after_kill = ran[len(done_before) :]
            assert after_kill and after_kill == list(range(after_kill[0], KILL_STEPS + 1)), (job_id, ran)
            assert after_kill[0] <= len(done_before) + 1, (job_id, ran, done_before)
            print(f"{job_id}: steps before the kill {done_before}, after it {after_kill}")
            assert check_attempts(result, events, job_id)[0] == a.replica_id
            assert RESUMED_AFTER.format(a.replica_id) in move_reasons(result, events, 2), job_id
            assert result.attempts[1].replica_id in (b.replica_id, c.replica_id)
            for replica in (b, c):
                job = (await replica.stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)).job
                assert job.phases[0].result == result, (job_id, replica.name)


# -- a held call moved, then approved -----------------------------------------------------------


def held_phase(workdir: Path) -> pb.RunPhaseRequest:
    """``stepped_script``'s step 1 held by a breakpoint (not `once`: a call asked again after the
    move must be held again, never run unapproved); the later steps run unheld."""
    first = res.Breakpoint(tool_name="Bash", input_pattern=res.InputPatternCondition(regex="echo 1 >>"))
    return pb.RunPhaseRequest(
        job_id="held", phase_id="p1", prompt="go", working_dir=str(workdir),
        options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[first]),
    )  # fmt: skip


# The held phases: step 1 held, then more work than the drain's budget (STEPS_AFTER x SLEEP_S).
HELD_STEPS, HELD_SLEEP_S = 7, 4


IDS = {"job_id": "held", "phase_id": "p1"}


async def held_calls(replica: Replica) -> list:
    """The phase's held calls as its owner has them (InspectPhase, forwarded to it by ``replica``)."""
    try:
        inspection = (await replica.stub.InspectPhase(pb.InspectPhaseRequest(**IDS), timeout=10)).inspection
    except grpc.aio.AioRpcError as exc:  # no owner to ask at this moment (between two replicas)
        if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION):
            return []
        raise
    return [p.call for p in inspection.pending_calls]


async def wait_held(replica: Replica, limit_s: float = 60.0) -> list:
    """The held calls, once there is one (the record follows the event through the store's writer)."""
    async with asyncio.timeout(limit_s):
        while True:
            held = await held_calls(replica)
            if held:
                return held
            await asyncio.sleep(0.2)


async def start_held(a: Replica, shared: Path):
    workdir = shared / "held"
    workdir.mkdir()
    run = follow(a.stub.RunPhase(held_phase(workdir), timeout=300))
    hit = await run.wait_for(
        lambda e: e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
    )
    return workdir, run, hit


def check_moved_stream(run, a: Replica) -> int:
    """The RunPhase caller on the drained replica: UNAVAILABLE, PHASE_MOVED with what WatchPhase
    needs, a RetryInfo; every event up to ``after_sequence`` was delivered. Returns that sequence."""
    assert run.error is not None, "the caller's stream on the drained replica did not end with the move"
    assert run.error.code() == grpc.StatusCode.UNAVAILABLE, run.error
    info, retry = status_details(run.error)
    assert (info.domain, info.reason) == ("runner.helix", "PHASE_MOVED"), info
    after = int(info.metadata["after_sequence"])
    assert dict(info.metadata) == {"job_id": "held", "phase_id": "p1", "after_sequence": str(after),
                                   "from_replica": a.replica_id}  # fmt: skip
    assert retry is not None and retry.retry_delay.ToTimedelta().total_seconds() > 0
    assert after == run.events[-1].sequence and gap_free(run.events)
    return after


@pytest.mark.timeout(360)  # several real CLIs and restarts on a shared 2-core machine
async def test_a_held_call_moved_by_a_drain_then_approved_runs_once(claude_binary, postgres_url, tmp_path):
    script = tmp_path / "script.json"
    stepped_script(HELD_STEPS, HELD_SLEEP_S).save(script)
    shared = shared_workspace(tmp_path / "shared")
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script), env=ENV,
                       workspace_root=shared) as (a, b, c):  # fmt: skip
        workdir, run, hit = await start_held(a, shared)
        assert [t.tool_use_id for t in await wait_held(b)] == [hit.control.tool_use_id]

        assert await a.stop(STOP_LIMIT_S) == 0, a.logs()[-4000:]  # the drain hands the held phase over
        await run.finish(30)
        after = check_moved_stream(run, a)

        # The rest, from C: the adopter's attempt, and the call held again (nothing ran).
        rest = follow(c.stub.WatchPhase(pb.WatchPhaseRequest(**IDS, after_sequence=after), timeout=300))
        adopted = await rest.wait_for(
            lambda e: e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED
        )
        assert adopted.control.attempt == 2 and adopted.control.resumed_session_id
        async with asyncio.timeout(90):  # the resumed CLI asked for the call again: held again
            while True:
                phase = (await b.stub.GetJob(pb.GetJobRequest(job_id="held"), timeout=10)).job.phases[0]
                if phase.status == res.PHASE_STATUS_AWAITING_APPROVAL:
                    break
                assert phase.status not in FINAL, phase.status_reason
                await asyncio.sleep(0.2)
        held = await wait_held(b)
        assert len(held) == 1 and steps_ran(workdir) == []  # nothing ran

        await b.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(**IDS, tool_use_id=held[0].tool_use_id, approve=pb.ApproveDecision()),
            timeout=10,
        )
        events, result = await rest.finish(120)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert steps_ran(workdir) == list(range(1, HELD_STEPS + 1))  # the held tool ran exactly once
        whole = run.events + events
        assert gap_free(whole)
        assert (whole, result) == await collect(b.stub.WatchPhase(pb.WatchPhaseRequest(**IDS), timeout=30))
        approvals = [
            e
            for e in whole
            if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_TOOL_APPROVED
        ]
        assert len(approvals) == 1
        calls = (await c.stub.ListToolCalls(pb.ListToolCallsRequest(**IDS), timeout=10)).tool_calls
        assert [t.status for t in calls].count(res.TOOL_CALL_STATUS_SUCCEEDED) == HELD_STEPS
        assert check_attempts(result, whole, "held") == [a.replica_id]
        assert MOVED_FROM.format(a.replica_id) in move_reasons(result, whole, 2)


@pytest.mark.timeout(360)  # several real CLIs and restarts on a shared 2-core machine
async def test_an_approval_sent_while_the_held_call_moves_is_applied_once(
    claude_binary, postgres_url, tmp_path
):
    script = tmp_path / "script.json"
    stepped_script(HELD_STEPS, HELD_SLEEP_S).save(script)
    shared = shared_workspace(tmp_path / "shared")
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script), env=ENV,
                       workspace_root=shared) as (a, b, c):  # fmt: skip
        workdir, run, hit = await start_held(a, shared)
        watch = follow(c.stub.WatchPhase(pb.WatchPhaseRequest(**IDS), timeout=300))
        await watch.wait_for(lambda e: e.sequence == hit.sequence)

        stopping = asyncio.create_task(a.stop(STOP_LIMIT_S))
        # The approval goes out through B while A drains: whatever the moment, it must land once.
        tool_use_id = hit.control.tool_use_id
        answers = []
        async with asyncio.timeout(120):
            while True:
                try:
                    await b.stub.ResolveToolCall(
                        pb.ResolveToolCallRequest(
                            **IDS, tool_use_id=tool_use_id, approve=pb.ApproveDecision()
                        ),
                        timeout=10,
                    )
                    answers.append("OK")
                    break
                except grpc.aio.AioRpcError as exc:
                    # Refused while the call is between two replicas: asked again, for the call
                    # held now (the same id, or a new one if the resumed CLI asked anew).
                    answers.append(exc.code().name)
                    held = await held_calls(b)
                    if held:
                        tool_use_id = held[0].tool_use_id
                    await asyncio.sleep(0.2)
        assert await stopping == 0, a.logs()[-4000:]
        print(f"answers to the approval during the move: {answers}")
        try:
            events, result = await watch.finish(150)  # 7 steps of 4 s, one CLI start, a loaded machine
        except TimeoutError:
            held = await held_calls(b)
            assert not held, (
                f"the approval was answered {answers[-1]} but the call is held again: it was lost"
            )
            raise
        assert watch.error is None and result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        # Neither lost (it ran) nor applied twice (once); the rest ran once each, in order.
        assert steps_ran(workdir) == list(range(1, HELD_STEPS + 1))
        assert gap_free(events)
        approvals = [
            e
            for e in events
            if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_TOOL_APPROVED
        ]
        assert len(approvals) == 1
        # Before or after the approval, the phase moved (its work outlasts the drain's budget).
        after = check_moved_stream(run, a)
        assert run.events == events[:after]
        assert check_attempts(result, events, "held") == [a.replica_id]
        assert MOVED_FROM.format(a.replica_id) in move_reasons(result, events, 2)


# -- the queue follows the room -----------------------------------------------------------------

# One running phase per replica: a phase sent to a full replica waits in its queue (placement by
# free slots finds no room elsewhere either, docs/scale-out.md "Placement by free slots").
QUEUE_ENV = {**ENV, "HELIX_RUNNER_MAX_RUNNING_PHASES": "1"}
LONG_STEPS, SHORT_STEPS, QUEUE_SLEEP_S = 8, 2, 3


def request(job_id: str, workdir: Path, prompt: str = "go") -> pb.RunPhaseRequest:
    return pb.RunPhaseRequest(job_id=job_id, phase_id="p1", prompt=prompt, working_dir=str(workdir),
                              options=pb.PhaseOptions(allowed_tools=["Bash"]))  # fmt: skip


async def occupy(replica: Replica, shared: Path, job_id: str, prompt: str = "go"):
    """A phase running on ``replica`` (in its first tool call): the replica's one slot is taken."""
    (shared / job_id).mkdir()
    run = follow(replica.stub.RunPhase(request(job_id, shared / job_id, prompt), timeout=300))
    await run.wait_for(lambda e: e.HasField("tool_call_started"))
    return run


def queued_event(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_QUEUED


def ns_of(timestamp) -> int:
    return timestamp.seconds * 1_000_000_000 + timestamp.nanos


@pytest.mark.timeout(420)  # several real CLIs and restarts on a shared 2-core machine
async def test_a_queued_phase_moves_to_the_replica_where_room_frees(claude_binary, postgres_url, tmp_path):
    script = tmp_path / "script.json"
    stepped_script(LONG_STEPS, QUEUE_SLEEP_S, short=SHORT_STEPS).save(script)
    shared = shared_workspace(tmp_path / "shared")
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script), env=QUEUE_ENV,
                       workspace_root=shared) as (a, b, c):  # fmt: skip
        long_a = await occupy(a, shared, "long-a")
        long_c = await occupy(c, shared, "long-c")
        short_b = await occupy(b, shared, "short-b", f"{SHORT} go")
        (shared / "queued").mkdir()
        # Sent to A, full like the others: it waits in A's queue. Its caller uses the client, which
        # follows the phase if it moves (PHASE_MOVED).
        async with RunnerClient(f"127.0.0.1:{a.port}") as client:
            queued_call = client.run_phase(
                cpb.RunPhaseRequest(job_id="queued", phase_id="p1", prompt=f"{SHORT} go",
                                    working_dir=str(shared / "queued"),
                                    options=cpb.PhaseOptions(allowed_tools=["Bash"]))
            )  # fmt: skip
            followed, arrived = [], asyncio.Event()

            async def read_queued():
                async for e in queued_call:
                    followed.append(e)
                    arrived.set()
                return queued_call.result

            reader = asyncio.create_task(read_queued())
            await asyncio.wait_for(arrived.wait(), 60)  # the phase exists: watch it from C
            watch = follow(
                c.stub.WatchPhase(pb.WatchPhaseRequest(job_id="queued", phase_id="p1"), timeout=300)
            )
            await watch.wait_for(queued_event)
            # B's short phase ends: B has room while A's long phase still runs; the queued phase
            # goes there rather than waiting for A.
            _, short_result = await short_b.finish(120)
            assert short_result.status == res.PHASE_STATUS_SUCCEEDED, short_result.reason
            followed_result = await asyncio.wait_for(reader, 240)
        events, result = await watch.finish(60)
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert followed_result.status == cpb.PhaseStatus.SUCCEEDED
        assert gap_free(events) and same_events(followed, events)
        assert steps_ran(shared / "queued") == list(range(1, SHORT_STEPS + 1))
        (started,) = [
            e
            for e in events
            if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED
        ]
        _, long_result = await long_a.finish(240)
        assert long_result.status == res.PHASE_STATUS_SUCCEEDED, long_result.reason
        assert ns_of(started.receive_time) < ns_of(long_result.end_time)  # it did not wait for A's room
        assert [x.replica_id for x in result.attempts] == [b.replica_id]  # it ran where room freed
        _, long_c_result = await long_c.finish(240)
        assert long_c_result.status == res.PHASE_STATUS_SUCCEEDED, long_c_result.reason


@pytest.mark.timeout(420)  # several real CLIs and restarts on a shared 2-core machine
async def test_a_phase_queued_on_a_killed_replica_runs_on_another(claude_binary, postgres_url, tmp_path):
    script = tmp_path / "script.json"
    stepped_script(LONG_STEPS, QUEUE_SLEEP_S, short=SHORT_STEPS).save(script)
    shared = shared_workspace(tmp_path / "shared")
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script), "--replica-lease-seconds",
                       str(LEASE_S), env=QUEUE_ENV, workspace_root=shared) as (a, b, c):  # fmt: skip
        long_a = await occupy(a, shared, "long-a")
        short_b = await occupy(b, shared, "short-b", f"{SHORT} go")
        short_c = await occupy(c, shared, "short-c", f"{SHORT} go")
        (shared / "queued").mkdir()
        queued_run = follow(a.stub.RunPhase(request("queued", shared / "queued", f"{SHORT} go"), timeout=300))
        await queued_run.wait_for(queued_event)
        watches = {
            job_id: follow(b.stub.WatchPhase(pb.WatchPhaseRequest(job_id=job_id, phase_id="p1"), timeout=300))
            for job_id in ("queued", "long-a")
        }
        for watch in watches.values():
            await watch.wait_for(lambda e: True)

        await a.kill()
        # The queued phase never ran: it is admitted by a live replica once it has room (after its
        # short phase), and runs there; A's running phase resumes too.
        for job_id, watch in watches.items():
            events, result = await watch.finish(300)
            assert watch.error is None and result.status == res.PHASE_STATUS_SUCCEEDED, (
                job_id,
                result.reason,
            )
            assert gap_free(events), job_id
            assert res.PHASE_STATUS_INTERRUPTED not in [
                e.status_changed.to_status for e in events if e.HasField("status_changed")
            ], job_id
        _, queued_result = await watches["queued"].finish(1)
        assert [x.replica_id for x in queued_result.attempts][-1] in (b.replica_id, c.replica_id)
        assert steps_ran(shared / "queued") == list(range(1, SHORT_STEPS + 1))
        for run in (queued_run, long_a):  # their callers were connected to A: their streams broke
            await run.finish(30)
            assert run.error is not None and run.error.code() == grpc.StatusCode.UNAVAILABLE, (
                run.error,
                run.result,
            )
        for run in (short_b, short_c):
            _, short_result = await run.finish(120)
            assert short_result.status == res.PHASE_STATUS_SUCCEEDED, short_result.reason

"""Three replicas as three `helix-runner serve` processes on one PostgreSQL database.

The scale-out issue's cluster tests (docs/scale-out.md, "Tests of N processes"): a real-CLI phase
run on A is read, watched and controlled through B and C; the owner killed with SIGKILL mid-run
is recorded INTERRUPTED by the survivors within the documented bound (lease + sweep interval),
its processes end with it and its history survives; 100 phases spread over the three (a fake CLI:
scale is under test, not the CLI) lose and reorder nothing, watched from another replica.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import grpc
import psycopg
import pytest
from support.cluster import cluster, follow, free_port, write_fake_cli
from support.processes import alive, find_process, wait_gone
from support.runner_server import collect

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.offline import Reply, Script
from helix_runner.phases.takeover import REASON as TAKEOVER_REASON
from helix_runner.store.protocol import sweep_interval_seconds

pytestmark = [pytest.mark.real_cli, pytest.mark.slow]

FINAL = {res.PHASE_STATUS_SUCCEEDED, res.PHASE_STATUS_FAILED, res.PHASE_STATUS_CANCELLED,
         res.PHASE_STATUS_INTERRUPTED}  # fmt: skip


def control(kind):
    return lambda e: e.HasField("control") and e.control.kind == kind


def held_request(ids: dict, workdir: Path) -> pb.RunPhaseRequest:
    """A phase whose first Bash call is held by a breakpoint."""
    return pb.RunPhaseRequest(
        **ids, prompt="go", working_dir=str(workdir),
        options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]),
    )  # fmt: skip


async def test_a_phase_on_a_is_listed_by_b_watched_from_c_and_controlled_through_both(
    claude_binary, postgres_url, tmp_path
):
    script = tmp_path / "script.json"
    Script(
        [
            Reply.tool_use("Bash", {"command": "touch one.txt"}),
            # Streamed slowly, so the pause requested after the approval lands before this call.
            Reply.tool_use("Bash", {"command": "touch two.txt"}, chunk_delay=0.2),
            Reply.text("Both."),
        ]
    ).save(script)
    async with cluster(tmp_path, postgres_url, "--offline-script", str(script)) as (a, b, c):
        ids = {"job_id": "job-3", "phase_id": "p1"}
        run = follow(a.stub.RunPhase(held_request(ids, a.workdir), timeout=120))
        hit = await run.wait_for(control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT))

        # B never saw the phase: it lists it from the database, still running (held).
        job = (await b.stub.GetJob(pb.GetJobRequest(job_id="job-3"), timeout=10)).job
        assert [(p.phase_id, p.status in FINAL) for p in job.phases] == [("p1", False)]
        jobs = (await b.stub.ListJobs(pb.ListJobsRequest(), timeout=10)).jobs
        assert [j.job_id for j in jobs] == ["job-3"]

        # C watches it live from the start; then approval through C, pause and resume through B.
        watch = follow(c.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=120))
        await watch.wait_for(control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT))
        resolve = pb.ResolveToolCallRequest(
            **ids, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()
        )
        approved = await c.stub.ResolveToolCall(resolve, timeout=10)
        assert approved.tool_call.tool_use_id == hit.control.tool_use_id
        paused = await b.stub.PausePhase(pb.PausePhaseRequest(**ids), timeout=10)
        assert paused.phase.status == res.PHASE_STATUS_PAUSING
        held = await run.wait_for(control(ev.CONTROL_EVENT_KIND_PAUSED))
        assert "touch two.txt" in held.control.input_json
        await watch.wait_for(control(ev.CONTROL_EVENT_KIND_PAUSED))  # C follows live, through NOTIFY
        assert (a.workdir / "one.txt").exists() and not (a.workdir / "two.txt").exists()
        resumed = await b.stub.ResumePhase(pb.ResumePhaseRequest(**ids), timeout=10)
        assert resumed.phase.status == res.PHASE_STATUS_RUNNING

        events, result = await run.finish()
        assert run.error is None and result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert (a.workdir / "two.txt").exists()
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        assert await watch.finish() == (events, result)  # C: the identical sequence, then the result
        assert [e.control.kind for e in events if e.HasField("control")] == [
            ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED,
            ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT,
            ev.CONTROL_EVENT_KIND_TOOL_APPROVED,
            ev.CONTROL_EVENT_KIND_PAUSE_REQUESTED,
            ev.CONTROL_EVENT_KIND_PAUSED,
            ev.CONTROL_EVENT_KIND_RESUMED,
        ]
        for replica in (a, b, c):  # the final status is the same wherever it is asked
            job = (await replica.stub.GetJob(pb.GetJobRequest(job_id="job-3"), timeout=10)).job
            assert job.status == res.PHASE_STATUS_SUCCEEDED, replica.name
            assert [p.status for p in job.phases] == [res.PHASE_STATUS_SUCCEEDED], replica.name
            assert job.phases[0].result == result, replica.name
        # Every control action is in the audit trail (shared: any replica lists it), and each event a
        # call caused names who took it (docs/tenancy.md).
        trail = (await b.stub.ListAuditEntries(pb.ListAuditEntriesRequest(job_id="job-3"), timeout=10)).entries
        actions = {(e.action, e.outcome) for e in trail}
        assert {("RunPhase", "OK"), ("ResolveToolCall", "OK"), ("PausePhase", "OK"),
                ("ResumePhase", "OK")} <= actions, actions
        by = {e.control.kind: e.control.actor for e in events if e.HasField("control")}
        assert by[ev.CONTROL_EVENT_KIND_TOOL_APPROVED] == by[ev.CONTROL_EVENT_KIND_RESUMED] == "admin"
        assert by[ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT] == ""


# The documented bound (docs/scale-out.md, "Dead-replica takeover"): the owner's lease runs out at
# most one lease after its last heartbeat (at most the kill), and a survivor sweeps every third of
# a lease. A short lease (`--replica-lease-seconds`) keeps the test from waiting the default 20 s.
# The wait allows scheduling slack on a loaded 2-core machine on top.
LEASE_S = 3.0
TAKEOVER_BOUND_S = LEASE_S + sweep_interval_seconds(LEASE_S)
TAKEOVER_SLACK_S = 10.0


async def test_the_owner_killed_mid_run_is_interrupted_by_the_others_and_leaves_nothing_behind(
    claude_binary, postgres_url, tmp_path
):
    script = tmp_path / "script.json"
    # The tool's shell writes who it is into its working directory: its pid in the sandbox's PID
    # namespace and its start time (support.processes.find_process finds it on the host).
    Script(
        [
            Reply.tool_use(
                "Bash", {"command": "echo \"$$ $(cut -d' ' -f22 /proc/$$/stat)\" > tool.pid && sleep 300",
                         "description": "A long step"}
            ),
            Reply.text("never reached"),
        ]
    ).save(script)
    async with cluster(
        tmp_path, postgres_url, "--offline-script", str(script), "--replica-lease-seconds", str(LEASE_S)
    ) as (a, b, c):
        ids = {"job_id": "job-k", "phase_id": "p1"}
        request = pb.RunPhaseRequest(**ids, prompt="go", working_dir=str(a.workdir),
                                     options=pb.PhaseOptions(allowed_tools=["Bash"]))  # fmt: skip
        run = follow(a.stub.RunPhase(request, timeout=120))
        await run.wait_for(lambda e: e.HasField("tool_call_started"))
        # The tool's shell writes its pid, then forks `sleep 300`: the scope is complete (the CLI, the
        # shell and its sleep) only once the fork happened, a moment after the marker appears.
        marker = a.workdir / "tool.pid"
        scope: list[int] = []
        async with asyncio.timeout(30):
            while True:
                if marker.exists() and len(marker.read_text().split()) == 2:
                    tool = find_process(marker.read_text())
                    scope = a.scope_processes()
                    if tool in scope and len(scope) >= 3:
                        break
                await asyncio.sleep(0.05)
        watch = follow(c.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=120))
        await watch.wait_for(lambda e: e.HasField("tool_call_started"))

        os.kill(a.proc.pid, signal.SIGKILL)  # the server process only: its children are not signalled
        killed_at = time.monotonic()
        await asyncio.to_thread(a.proc.wait, 10)

        # Containment: the shim's parent-death signal ends every process of the phase, the tool included.
        assert await asyncio.to_thread(wait_gone, scope, 10.0) == []
        assert a.scope_processes() == [] and not alive(tool)

        async with asyncio.timeout(TAKEOVER_BOUND_S + TAKEOVER_SLACK_S):
            while True:
                phase = (await b.stub.GetJob(pb.GetJobRequest(job_id="job-k"), timeout=10)).job.phases[0]
                if phase.status in FINAL:
                    break
                await asyncio.sleep(0.2)
        took = time.monotonic() - killed_at
        # Its workspace is on no root marked shared: it could not resume elsewhere, and says why (issue 24).
        assert phase.status == res.PHASE_STATUS_INTERRUPTED and phase.status_reason.startswith(TAKEOVER_REASON)
        assert "could not continue on another replica" in phase.status_reason
        print(f"owner killed -> INTERRUPTED seen on B after {took:.1f} s (bound {TAKEOVER_BOUND_S:.0f} s)")

        # The watcher on C, following the phase live when its owner died, ends with the taker's result.
        watched, watched_result = await watch.finish(30)
        assert watch.error is None and watched_result.status == res.PHASE_STATUS_INTERRUPTED
        # The RunPhase caller of the dead owner saw a prefix of the history; the history is intact.
        assert run.error is not None and run.error.code() == grpc.StatusCode.UNAVAILABLE
        events, result = await collect(c.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=30))
        assert (events, result) == (watched, watched_result)
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))  # gap-free
        assert events[: len(run.events)] == run.events and len(events) == len(run.events) + 1
        assert events[-1].status_changed.to_status == res.PHASE_STATUS_INTERRUPTED
        assert result.last_sequence == events[-1].sequence and result.reason == phase.status_reason
        assert result.HasField("cost") and result.cost.computed_usd > 0  # the turn before the kill
        # Its one attempt ran when the owner died: listed, ended by the shutdown (phases/attempts.py).
        assert [(a.number, a.end_kind) for a in result.attempts] == [
            (1, res.ATTEMPT_END_KIND_SERVER_SHUTDOWN)
        ]
        for replica in (b, c):
            job = (await replica.stub.GetJob(pb.GetJobRequest(job_id="job-k"), timeout=10)).job
            assert job.status == res.PHASE_STATUS_INTERRUPTED, replica.name
            # The sweep's result carries the cost the dead owner recorded, so WatchPhase's result
            # and GetJob's are the same message, cost included (phases/takeover.py).
            assert job.phases[0].result == result, replica.name
            calls = (
                await replica.stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-k"), timeout=10)
            ).tool_calls
            assert [(t.name, t.status) for t in calls] == [("Bash", res.TOOL_CALL_STATUS_UNFINISHED)], (
                replica.name
            )


PHASES = 100
LINES = 20


async def test_a_hundred_phases_over_three_replicas_lose_and_reorder_nothing(postgres_url, tmp_path):
    fake = write_fake_cli(tmp_path)
    async with cluster(tmp_path, postgres_url, "--claude-path", str(fake),
                       env={"HELIX_RUNNER_RETRY_MAX_ATTEMPTS": "1"}) as replicas:  # fmt: skip

        async def one(i: int):
            owner, watcher = replicas[i % 3], replicas[(i + 1) % 3]
            ids = {"job_id": f"job-{i:03d}", "phase_id": "p1"}
            request = pb.RunPhaseRequest(
                **ids, prompt="go", working_dir=str(owner.workdir),
                options=pb.PhaseOptions(env={"HELIX_TEST_LINES": str(LINES)}),
            )  # fmt: skip
            run = follow(owner.stub.RunPhase(request, timeout=150))
            await run.wait_for(lambda e: True, 150)  # the phase exists: watch it from another replica
            watch = follow(watcher.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=150))
            return i, await run.finish(150), await watch.finish(150), run.error, watch.error

        outcomes = await asyncio.gather(*(one(i) for i in range(PHASES)))
        for i, (events, result), watched, run_error, watch_error in outcomes:
            assert run_error is None and watch_error is None, (i, run_error, watch_error)
            assert result.status == res.PHASE_STATUS_SUCCEEDED, (i, result.reason)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1)), i  # no loss, no reorder
            texts = [e.assistant_text.text for e in events if e.HasField("assistant_text")]
            assert texts == [f"i={k}" for k in range(1, LINES + 1)], i
            assert result.last_sequence == events[-1].sequence, i
            assert watched == (events, result), i  # the same from the replica that does not run it
        # Every status right wherever it is asked: each job from the replica that neither ran nor watched it.
        for i in range(PHASES):
            job = (
                await replicas[(i + 2) % 3].stub.GetJob(pb.GetJobRequest(job_id=f"job-{i:03d}"), timeout=10)
            ).job
            assert (
                job.status == res.PHASE_STATUS_SUCCEEDED
                and job.phases[0].status == res.PHASE_STATUS_SUCCEEDED
            ), i
        listed = (await replicas[0].stub.ListJobs(pb.ListJobsRequest(page_size=200), timeout=10)).jobs
        assert len(listed) == PHASES


async def test_processes_sharing_one_port_forward_control_to_the_owner(postgres_url, tmp_path):
    """reuse_port: three processes on one port; each advertises a port of its own for forwarding."""
    fake = write_fake_cli(tmp_path)
    shared, workdir = free_port(), tmp_path / "shared-work"
    workdir.mkdir()
    args = [
        "--claude-path",
        str(fake),
        "--port",
        str(shared),
        "--reuse-port",
        "--workspace-root",
        str(workdir),
    ]
    async with cluster(
        tmp_path, postgres_url, *args, env={"HELIX_RUNNER_RETRY_MAX_ATTEMPTS": "1"}
    ) as replicas:
        assert {r.port for r in replicas} == {shared}
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
            rows = await (await db.execute("SELECT address FROM replicas")).fetchall()
        addresses = {address for (address,) in rows}
        assert len(addresses) == 3 and f"127.0.0.1:{shared}" not in addresses

        # Each call on a fresh connection (a channel of its own: grpc shares connections between
        # channels by default) lands on whichever process the kernel picks.
        def connect():
            return grpc.aio.insecure_channel(
                f"127.0.0.1:{shared}", options=[("grpc.use_local_subchannel_pool", 1)]
            )

        async def on_shared_port(method: str, request):
            async with connect() as channel:
                return await getattr(pb_grpc.RunnerServiceStub(channel), method)(request, timeout=10)

        runs = []
        for i in range(9):
            ids = {"job_id": f"shared-{i}", "phase_id": "p1"}
            request = pb.RunPhaseRequest(
                **ids, prompt="go", working_dir=str(workdir),
                options=pb.PhaseOptions(env={"HELIX_TEST_LINES": "400", "HELIX_TEST_STEP": "0.05"}),
            )  # fmt: skip
            channel = connect()
            run = follow(pb_grpc.RunnerServiceStub(channel).RunPhase(request, timeout=60))
            await run.wait_for(lambda e: e.HasField("assistant_text"))
            runs.append((ids, channel, run))
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
            owners = await (await db.execute("SELECT DISTINCT owner_id FROM phases")).fetchall()
        assert len(owners) > 1  # 9 connections, 3 processes: all on one is (1/3)**8
        for ids, _, _ in runs:  # control reaches the owner whichever process takes the call
            for _ in range(3):
                listed = await on_shared_port("ListBreakpoints", pb.ListBreakpointsRequest(**ids))
                assert list(listed.breakpoints) == []
            await on_shared_port("CancelPhase", pb.CancelPhaseRequest(**ids))
        for ids, channel, run in runs:
            _, result = await run.finish(30)
            await channel.close()
            assert result.status == res.PHASE_STATUS_CANCELLED, (ids, result.reason)

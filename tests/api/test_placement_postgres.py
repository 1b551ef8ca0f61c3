"""Placement by free slots end to end: two real servers on one PostgreSQL, the real CLI.

Replica A (max_running_phases 1) runs a phase held at a breakpoint; a second RunPhase sent to A is
placed on B, which has room: B owns and runs it while A's is still held, and the stream the client
reads through A is the one a WatchPhase on B shows. With B full too, a RunPhase queues on A as
before; a client cancelling a placed RunPhase cancels the phase on B; a placement whose target
cannot be reached falls back to queueing on A (docs/scale-out.md, "Placement by free slots").
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap

import grpc
import pytest
from support.certs import CertificateAuthority
from support.runner_server import collect, replica_pair, start_runner
from support.streams import Stream, breakpoint_hit, queued

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.offline import Reply

FULL_AT_ONE = {"max_running_phases": 1}


def held_request(replica, job_id: str) -> pb.RunPhaseRequest:
    """A phase that stops at its first Bash call until approved (or cancelled)."""
    return pb.RunPhaseRequest(
        job_id=job_id, phase_id="p1", prompt="go", working_dir=str(replica.workdir),
        options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]))


def owner(postgres_cluster, postgres_url, job_id: str):
    return postgres_cluster.execute(postgres_url, "SELECT owner_id FROM phases WHERE job_id = %s", (job_id,))[0][0]


@pytest.mark.real_cli
async def test_a_phase_the_full_replica_receives_runs_on_the_replica_with_room(
    claude_binary, scripted_api, postgres_url, postgres_cluster, tmp_path
):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo on a"}),
        Reply.text("Placed and done."),
        Reply.text("A is done."),
    ])
    # Both replicas may use the test's whole directory: a placed phase runs in A's working dir on B.
    async with replica_pair(tmp_path, postgres_url, api, api, workspace_roots=[str(tmp_path)], **FULL_AT_ONE) as (a, b):
        on_a = {"job_id": "job-a", "phase_id": "p1"}
        run_a = Stream(a.stub.RunPhase(held_request(a, "job-a"), timeout=120))
        hit = await run_a.wait_for(breakpoint_hit)  # A's one slot is taken
        rooms = {r.replica_id: (r.max_running, r.active, r.live) for r in a.server.cluster.replica_capacity()}
        assert rooms == {"replica-a": (1, 1, True), "replica-b": (1, 0, True)}

        placed = {"job_id": "job-p", "phase_id": "p1"}
        events, result = await collect(a.stub.RunPhase(pb.RunPhaseRequest(
            **placed, prompt="go", working_dir=str(a.workdir)), timeout=60))
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert result.result_text == "Placed and done."
        assert not any(queued(e) for e in events)  # it never waited
        assert run_a.result is None  # ... while A's phase is still held at its breakpoint
        assert owner(postgres_cluster, postgres_url, "job-p") == "replica-b"
        recording = postgres_cluster.execute(
            postgres_url, "SELECT recording_dir FROM phases WHERE job_id = 'job-p'")[0][0]
        assert recording.startswith(str(b.data_dir))  # B ran its CLI
        # The stream relayed through A is the phase's stream as its owner serves it.
        assert await collect(b.stub.WatchPhase(pb.WatchPhaseRequest(**placed), timeout=30)) == (events, result)
        assert await collect(a.stub.WatchPhase(pb.WatchPhaseRequest(**placed), timeout=30)) == (events, result)

        await a.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **on_a, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        _, result_a = await run_a.finish()
        assert result_a.status == res.PHASE_STATUS_SUCCEEDED, result_a.reason
        assert owner(postgres_cluster, postgres_url, "job-a") == "replica-a"


@pytest.mark.real_cli
async def test_placement_stops_when_every_replica_is_full_and_a_cancelled_caller_cancels_the_placed_phase(
    claude_binary, scripted_api, postgres_url, postgres_cluster, tmp_path
):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo on a"}),
        Reply.tool_use("Bash", {"command": "echo placed on b"}),
    ])
    async with replica_pair(tmp_path, postgres_url, api, api, workspace_roots=[str(tmp_path)], **FULL_AT_ONE) as (a, b):
        run_a = Stream(a.stub.RunPhase(held_request(a, "job-a"), timeout=120))
        await run_a.wait_for(breakpoint_hit)

        # 1. Placed on B and held there: B is full now too.
        x_call = a.stub.RunPhase(held_request(a, "job-x"), timeout=120)
        run_x = Stream(x_call)
        await run_x.wait_for(breakpoint_hit)
        assert owner(postgres_cluster, postgres_url, "job-x") == "replica-b"
        live_on_b = b.server.service.get_live("job-x", "p1")
        assert live_on_b is not None

        # 2. Every replica full: the phase waits on the replica that received it, for its own limit.
        run_y = Stream(a.stub.RunPhase(pb.RunPhaseRequest(job_id="job-y", phase_id="p1", prompt="go",
                                                          working_dir=str(a.workdir)), timeout=120))
        waiting = await run_y.wait_for(queued)
        assert waiting.control.queue.reason == res.QUEUE_REASON_SERVER_LIMIT
        assert "the server's limit is 1" in waiting.control.message
        assert owner(postgres_cluster, postgres_url, "job-y") == "replica-a"

        # 3. The client leaves the placed RunPhase (on_disconnect CANCEL): B cancels the phase.
        follow = Stream(b.stub.WatchPhase(pb.WatchPhaseRequest(job_id="job-x", phase_id="p1"), timeout=60))
        x_call.cancel()
        _, ended = await follow.finish()
        assert ended.status == res.PHASE_STATUS_CANCELLED
        await asyncio.wait_for(live_on_b.done.wait(), 10)  # no orphan: B's run of it is over
        assert b.server.service.get_live("job-x", "p1") is None

        # 4. B has room again but cannot be reached: the phase queues on A (the refusal is logged).
        postgres_cluster.execute(postgres_url, "UPDATE replicas SET address = '127.0.0.1:1' "
                                               "WHERE replica_id = 'replica-b'")
        run_z = Stream(a.stub.RunPhase(pb.RunPhaseRequest(job_id="job-z", phase_id="p1", prompt="go",
                                                          working_dir=str(a.workdir)), timeout=120))
        await run_z.wait_for(queued)
        assert owner(postgres_cluster, postgres_url, "job-z") == "replica-a"

        for job_id in ("job-z", "job-y", "job-a"):
            await a.stub.CancelPhase(pb.CancelPhaseRequest(job_id=job_id, phase_id="p1"), timeout=30)
        for stream in (run_z, run_y, run_a):
            _, result = await stream.finish()
            assert result.status == res.PHASE_STATUS_CANCELLED


@pytest.mark.real_cli
async def test_a_placed_run_phase_goes_over_mutual_tls_with_the_bearer_token(
    claude_binary, scripted_api, postgres_url, postgres_cluster, tmp_path
):
    # As tests/api/test_tls.py's forwarding test: one replica certificate naming a Service, mutual
    # TLS, and a bearer token every call (a placed one too) must carry.
    ca = CertificateAuthority(tmp_path / "pki")
    replica_cert = ca.issue("replica", dns=("helix-runner.test",))
    client = ca.issue("client", dns=("a-client",), server=False)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token-for-replicas\n")
    config = {
        "tls_cert_file": str(replica_cert.cert_file), "tls_key_file": str(replica_cert.key_file),
        "tls_client_ca_file": str(ca.ca_file), "tls_server_name": "helix-runner.test",
        "auth_token_file": str(token_file), "workspace_roots": [str(tmp_path)], **FULL_AT_ONE,
    }
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo on a"}), Reply.text("Placed over TLS.")])
    credentials = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(ca.ca, client.key, client.cert),
        grpc.access_token_call_credentials("s3cret-token-for-replicas"))
    async with replica_pair(tmp_path, postgres_url, api, api, **config) as (a, b), grpc.aio.secure_channel(
        f"127.0.0.1:{a.server.port}", credentials, options=[("grpc.ssl_target_name_override", "helix-runner.test")],
    ) as channel:
        stub = pb_grpc.RunnerServiceStub(channel)
        run_a = Stream(stub.RunPhase(held_request(a, "job-a"), timeout=120))
        await run_a.wait_for(breakpoint_hit)
        _, result = await collect(stub.RunPhase(pb.RunPhaseRequest(
            job_id="job-p", phase_id="p1", prompt="go", working_dir=str(a.workdir)), timeout=60))
        assert result.status == res.PHASE_STATUS_SUCCEEDED and result.result_text == "Placed over TLS."
        assert owner(postgres_cluster, postgres_url, "job-p") == "replica-b"
        await stub.CancelPhase(pb.CancelPhaseRequest(job_id="job-a", phase_id="p1"), timeout=30)
        _, result_a = await run_a.finish()
        assert result_a.status == res.PHASE_STATUS_CANCELLED


@pytest.mark.real_cli
async def test_a_draining_replica_lets_the_phases_it_placed_finish_within_its_grace(
    claude_binary, scripted_api, postgres_url, postgres_cluster, tmp_path
):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo on a"}),
        Reply.tool_use("Bash", {"command": "echo placed on b"}),
        Reply.text("Placed and done after A's drain began."),
    ])
    async with replica_pair(tmp_path, postgres_url, api, api, workspace_roots=[str(tmp_path)], **FULL_AT_ONE) as (a, b):
        run_a = Stream(a.stub.RunPhase(held_request(a, "job-a"), timeout=120))
        await run_a.wait_for(breakpoint_hit)
        run_p = Stream(a.stub.RunPhase(held_request(a, "job-p"), timeout=120))
        hit = await run_p.wait_for(breakpoint_hit)  # placed on B, held there
        assert owner(postgres_cluster, postgres_url, "job-p") == "replica-b"
        await a.stub.CancelPhase(pb.CancelPhaseRequest(job_id="job-a", phase_id="p1"), timeout=30)
        await run_a.finish()  # A runs nothing of its own now: only the relay keeps its drain waiting

        drain = asyncio.create_task(a.server.drain(20.0))
        await asyncio.sleep(2.0)  # past the 1 s a stopping server gives open calls
        rooms = {r.replica_id: r.max_running for r in b.server.cluster.replica_capacity()}
        assert rooms["replica-a"] == 0  # a draining replica takes no placed phases
        assert not drain.done()
        await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            job_id="job-p", phase_id="p1", tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()),
            timeout=10)
        _, result = await run_p.finish()  # relayed through the draining A to the end
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        await asyncio.wait_for(drain, 20)


# A CLI stand-in that starts and then stays running (init, then nothing until it is killed): the
# burst test below is about placement, not the CLI; like test_cluster_admission_postgres.FAST_CLI.
STAYING_CLI = """
    import sys, time
    sys.stdin.readline(); sys.stdin.readline()
    print('{"type":"system","subtype":"init","cwd":"/w","session_id":"s-1","tools":[],"model":"claude-sonnet-4-5",'
          '"permissionMode":"default","claude_code_version":"2.1.330","uuid":"u1"}', flush=True)
    time.sleep(600)
"""


@pytest.mark.slow  # several server processes or a kill and restart: the slower tier
async def test_a_burst_reaching_a_full_replica_fills_the_free_slots_elsewhere_and_no_more(
    postgres_url, postgres_cluster, tmp_path
):
    claude = tmp_path / "staying-claude"
    claude.write_text(f"#!{sys.executable}\n" + textwrap.dedent(STAYING_CLI))
    claude.chmod(0o755)
    config = {"claude_path": str(claude), "workspace_roots": [str(tmp_path)]}
    async with contextlib.AsyncExitStack() as stack:
        pair = []
        for name, limit in (("a", 1), ("b", 2)):
            (tmp_path / name).mkdir()
            harness = start_runner(tmp_path / name, None, database_url=postgres_url, replica_id=f"replica-{name}",
                                   max_running_phases=limit, **config)
            pair.append(await anext(harness))
            stack.push_async_callback(harness.aclose)
        a, b = pair

        def request(job_id: str) -> pb.RunPhaseRequest:
            return pb.RunPhaseRequest(job_id=job_id, phase_id="p1", prompt="stay", working_dir=str(a.workdir))

        first = Stream(a.stub.RunPhase(request("job-0"), timeout=120))
        await first.wait_for(lambda e: e.HasField("status_changed")
                             and e.status_changed.to_status == res.PHASE_STATUS_RUNNING)
        # Six at once: each reads the registry before any is written on B; B has two free slots.
        burst = [Stream(a.stub.RunPhase(request(f"job-{n}"), timeout=120)) for n in range(1, 7)]
        for stream in burst:
            await stream.wait_for(lambda e: e.HasField("status_changed"))
        owners = dict(postgres_cluster.execute(
            postgres_url, "SELECT owner_id, count(*) FROM phases GROUP BY owner_id"))
        assert owners == {"replica-a": 5, "replica-b": 2}
        on_b = [s for n, s in enumerate(burst, start=1) if owner(postgres_cluster, postgres_url, f"job-{n}") ==
                "replica-b"]
        assert all(not any(queued(e) for e in s.events) for s in on_b)  # both run on B at once

"""The audit trail from inside real phases: who approved a held call, on the event and in the log,
also when the call went through another replica (issue 32 item 4)."""

from __future__ import annotations

import hashlib

import grpc
import pytest
from support.runner_server import replica_pair
from support.streams import Stream, breakpoint_hit

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

ADMIN_TOKEN = "the-replicas-shared-token-0123"
ALICE, BOB = "alice-approves-team-a-0123456789", "bob-watches-team-a-0123456789"


@pytest.fixture
def auth_files(tmp_path):
    principals = tmp_path / "principals.toml"
    principals.write_text("\n".join([
        "[[token]]", 'name = "alice@team-a"', f'sha256 = "{hashlib.sha256(ALICE.encode()).hexdigest()}"',
        'grants = { team-a = ["approver", "operator"] }', "",
        "[[token]]", 'name = "bob@team-a"', f'sha256 = "{hashlib.sha256(BOB.encode()).hexdigest()}"',
        'grants = { team-a = ["viewer"] }', ""]))
    token = tmp_path / "token"
    token.write_text(ADMIN_TOKEN)
    return {"auth_principals_file": str(principals), "auth_token_file": str(token)}


def md(token: str):
    return (("authorization", f"Bearer {token}"),)


def held_phase(runner, job_id: str, token: str) -> Stream:
    request = pb.RunPhaseRequest(job_id=job_id, phase_id="p", project_id="team-a", prompt="go",
                                 working_dir=str(runner.workdir), options=pb.PhaseOptions(
                                     allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]))
    return Stream(runner.stub.RunPhase(request, metadata=md(token), timeout=120))


def approved(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_TOOL_APPROVED


async def test_who_approved_a_held_call_is_on_the_event_and_in_the_audit_trail(
        claude_binary, scripted_api, runner_factory, auth_files):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo audited"}), Reply.text("Done.")])
    async with runner_factory(api, **auth_files) as runner:
        phase = held_phase(runner, "job-audit", ALICE)
        hit = await phase.wait_for(breakpoint_hit)
        ids = {"job_id": "job-audit", "phase_id": "p", "tool_use_id": hit.control.tool_use_id}
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # a viewer may watch, not decide
            await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, approve=pb.ApproveDecision()),
                                              metadata=md(BOB), timeout=10)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, approve=pb.ApproveDecision()),
                                          metadata=md(ALICE), timeout=10)
        event = await phase.wait_for(approved)
        _, result = await phase.finish()
        assert result.status == res.PHASE_STATUS_SUCCEEDED
        log = await runner.stub.ListAuditEntries(pb.ListAuditEntriesRequest(project_id="team-a"),
                                                 metadata=md(ADMIN_TOKEN), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as hidden:  # the trail is for admins
            await runner.stub.ListAuditEntries(pb.ListAuditEntriesRequest(project_id="team-a"), metadata=md(ALICE),
                                               timeout=10)
    assert event.control.actor == "alice@team-a"
    assert hit.control.actor == ""  # the server held it by itself
    assert hidden.value.code() is grpc.StatusCode.PERMISSION_DENIED
    entries = [(e.principal, e.action, e.target, e.outcome) for e in reversed(log.entries)]
    assert entries == [
        ("alice@team-a", "RunPhase", "", "OK"),
        ("bob@team-a", "ResolveToolCall", hit.control.tool_use_id, "PERMISSION_DENIED"),
        ("alice@team-a", "ResolveToolCall", hit.control.tool_use_id, "OK"),
    ]
    assert all(e.project_id == "team-a" and e.job_id == "job-audit" and e.peer for e in log.entries)


async def test_a_call_through_another_replica_acts_as_its_caller_not_as_the_replica(
        claude_binary, scripted_api, postgres_url, tmp_path, auth_files):
    script = [Reply.tool_use("Bash", {"command": "echo forwarded"}), Reply.text("Done.")]
    async with replica_pair(tmp_path, postgres_url, scripted_api(script), scripted_api(script),
                            **auth_files) as (a, b):
        phase = held_phase(a, "job-fwd", ALICE)  # runs on A
        hit = await phase.wait_for(breakpoint_hit)
        ids = {"job_id": "job-fwd", "phase_id": "p", "tool_use_id": hit.control.tool_use_id}
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # B refuses bob before forwarding anything
            await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, approve=pb.ApproveDecision()),
                                         metadata=md(BOB), timeout=10)
        # A replica's own credentials carrying a viewer do not make it an approver at the owner.
        forged = (("authorization", f"Bearer {ADMIN_TOKEN}"), ("x-helix-forwarded", "1"),
                  ("x-helix-principal", '{"name": "bob@team-a", "grants": {"team-a": ["viewer"]}}'))
        with pytest.raises(grpc.aio.AioRpcError) as carried:
            await a.stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, approve=pb.ApproveDecision()),
                                         metadata=forged, timeout=10)
        await b.stub.ResolveToolCall(pb.ResolveToolCallRequest(**ids, approve=pb.ApproveDecision()),
                                     metadata=md(ALICE), timeout=10)
        event = await phase.wait_for(approved)
        _, result = await phase.finish()
        log = await a.stub.ListAuditEntries(pb.ListAuditEntriesRequest(job_id="job-fwd"),
                                            metadata=md(ADMIN_TOKEN), timeout=10)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert carried.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    assert event.control.actor == "alice@team-a"
    resolved = [(e.principal, e.outcome) for e in log.entries if e.action == "ResolveToolCall"]
    # B's entry (it checked and forwarded) and A's (it answered), both naming alice; bob refused twice.
    assert sorted(resolved) == sorted([("alice@team-a", "OK"), ("alice@team-a", "OK"),
                                       ("bob@team-a", "PERMISSION_DENIED"), ("bob@team-a", "PERMISSION_DENIED")])

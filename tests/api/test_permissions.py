"""Every RPC × every role × its own and a foreign project, derived from the route table (issue 32).

A real server with a principals file: one principal per role on ``team-a``, the old single token
(admin everywhere). Two jobs exist, one per project. Each RPC is called with the ids of the
caller's own job (or project) and of the foreign one:

* foreign, by job (or webhook): the answer is exactly a missing one's, asked by the same caller
  (code, ErrorInfo reason, message with the id swapped), so ids do not leak;
* foreign, by project: PERMISSION_DENIED;
* own: PERMISSION_DENIED exactly when the role lacks the permission the issue gives it; otherwise
  the handler answers (an empty request then fails its own checks, which is the point: it got there).
"""

from __future__ import annotations

import hashlib

import grpc
import pytest

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.api.routing import PERMISSIONS, Scope
from helix_runner.api.service_descriptor import SERVICE
from helix_runner.domain.access import parse_roles
from helix_runner.offline import Reply

ADMIN_TOKEN = "the-old-single-token-0123456789"
ROLES = ("viewer", "operator", "approver", "admin")
TOKENS = {role: f"{role}-of-team-a-0123456789" for role in ROLES}

# The issue's words, written out independently of api/routing.py: what each role may do.
READS = {"WatchPhase", "GetJob", "ListJobs", "ListToolCalls", "GetCostTotals", "GetPhaseDiff", "InspectPhase",
         "GetTaskOutput", "ListBreakpoints", "WhoAmI", "GetProjectQuota"}
OPERATE = {"RunPhase", "CancelPhase", "PausePhase", "ResumePhase", "StepPhase", "InterruptPhase", "SetPhaseModel",
           "SetPhasePermissionMode", "StopTask", "InjectMessage", "AddBreakpoint", "RemoveBreakpoint", "ForkPhase",
           "RewindPhase"}
APPROVE = {"ResolveToolCall", "ResolveEgressHold", "ResumePhase"}  # resume: a phase a quota paused
ADMINISTER = {"GetServerStatus", "CreateWebhook", "ListWebhooks", "DeleteWebhook", "ListWebhookDeliveries",
              "PutEgressSecret", "ListEgressSecrets", "DeleteEgressSecret", "ListAuditEntries", "SetProjectQuota",
              "ListEgressAllowances", "DeleteEgressAllowance"}
ALLOWED = {"viewer": READS, "operator": READS | OPERATE, "approver": READS | APPROVE,
           "admin": READS | OPERATE | APPROVE | ADMINISTER}


def test_the_issue_s_roles_cover_every_rpc_and_agree_with_the_route_table():
    assert READS | OPERATE | APPROVE | ADMINISTER == {m.name for m in SERVICE.methods}
    for name, need in PERMISSIONS.items():
        holders = {role for role, allowed in ALLOWED.items() if name in allowed}
        table = {role for role in ROLES
                 if need.allows(lambda r, role=role: r in parse_roles([role], "test"))}
        assert holders == table, name


@pytest.fixture
def principals_file(tmp_path):
    lines = []
    for role, token in TOKENS.items():
        lines += ["[[token]]", f'name = "{role}@team-a"', f'sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"',
                  f'grants = {{ team-a = ["{role}"] }}', ""]
    path = tmp_path / "principals.toml"
    path.write_text("\n".join(lines))
    token_file = tmp_path / "token"
    token_file.write_text(ADMIN_TOKEN)
    return {"auth_principals_file": str(path), "auth_token_file": str(token_file)}


def metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def call(channel, method, request, token):
    """(code name, ErrorInfo reason, message) of a call; ("OK", "", "") when it answered."""
    output = getattr(pb, method.output_type.name)
    path = f"/{SERVICE.full_name}/{method.name}"
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, request_serializer=type(request).SerializeToString,
                                          response_deserializer=output.FromString)(
                request, metadata=metadata(token), timeout=15)
            async for _ in stream:
                break
            stream.cancel()
        else:
            await channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                                      response_deserializer=output.FromString)(
                request, metadata=metadata(token), timeout=15)
    except grpc.aio.AioRpcError as exc:
        info = error_info(exc)
        return exc.code().name, info.reason if info else "", exc.details() or ""
    return "OK", "", ""


WEBHOOKS: dict[str, str] = {}  # job id -> a webhook of that job's project


async def make_webhooks(runner) -> None:
    for job, project in (("job-a", "team-a"), ("job-b", "team-b")):
        hook = await runner.stub.CreateWebhook(pb.CreateWebhookRequest(
            project_id=project, url="https://hooks.example.com/x", events=[res.WEBHOOK_EVENT_TYPE_PHASE_FINISHED]),
            metadata=metadata(ADMIN_TOKEN), timeout=10)
        WEBHOOKS[job] = hook.webhook.webhook_id


def request_for(method, job_id: str, project: str):
    request = getattr(pb, method.input_type.name)()
    fields = method.input_type.fields_by_name
    if "webhook_id" in fields:
        request.webhook_id = WEBHOOKS.get(job_id, "wh-nope")
    if "job_id" in fields:
        request.job_id = job_id
    if "phase_id" in fields:
        request.phase_id = "p1"
    if "project_id" in fields and PERMISSIONS[method.name].scope is not Scope.COSTS:
        request.project_id = project
    return request


async def test_every_rpc_with_every_role_on_its_own_and_a_foreign_project(claude_binary, scripted_api,
                                                                          runner_factory, principals_file):
    api = scripted_api([Reply.text("Done.")] * 2)
    async with runner_factory(api, **principals_file) as runner:
        for job, project in (("job-a", "team-a"), ("job-b", "team-b")):
            stream = runner.stub.RunPhase(pb.RunPhaseRequest(
                job_id=job, phase_id="p1", project_id=project, prompt="hi", working_dir=str(runner.workdir)),
                metadata=metadata(ADMIN_TOKEN), timeout=60)
            async for _ in stream:
                pass
        await make_webhooks(runner)
        problems = []
        for method in SERVICE.methods:
            need = PERMISSIONS[method.name]
            for role in ROLES:
                token = TOKENS[role]
                own = await call(runner.channel, method, request_for(method, "job-a", "team-a"), token)
                may = method.name in ALLOWED[role]
                if (own[0] == "PERMISSION_DENIED") == may and need.scope is not Scope.SERVER:
                    problems.append(f"{method.name} as {role} on its own project: {own}")
                if need.scope is Scope.SERVER:  # the server itself: only a grant on every project
                    if own[0] != "PERMISSION_DENIED":
                        problems.append(f"{method.name} as {role}@team-a: {own}")
                    continue
                if need.scope is Scope.LISTING:
                    continue  # filtered, not refused: test_a_listing_shows_only_what_the_caller_may_see
                foreign = await call(runner.channel, method, request_for(method, "job-b", "team-b"), token)
                if need.scope in (Scope.PHASE, Scope.COSTS, Scope.WEBHOOK):
                    missing = await call(runner.channel, method, request_for(method, "job-nope", "team-b"), token)
                    swapped = missing[2].replace("job-nope", "job-b").replace("wh-nope", WEBHOOKS["job-b"])
                    if foreign != (missing[0], missing[1], swapped):
                        problems.append(f"{method.name} as {role} on a foreign job: {foreign} vs missing {missing}")
                elif foreign[0] != "PERMISSION_DENIED":
                    problems.append(f"{method.name} as {role} on a foreign project: {foreign}")
            # The old single token still does everything it did.
            admin = await call(runner.channel, method, request_for(method, "job-b", "team-b"), ADMIN_TOKEN)
            if admin[0] in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
                problems.append(f"{method.name} with the old single token: {admin}")
            if method.name == "DeleteWebhook":  # it did delete them: the next methods need them again
                await make_webhooks(runner)
    assert not problems, "\n".join(problems)


async def test_a_listing_shows_only_what_the_caller_may_see(claude_binary, scripted_api, runner_factory,
                                                            principals_file):
    api = scripted_api([Reply.text("Done.")] * 2)
    async with runner_factory(api, **principals_file) as runner:
        for job, project in (("job-a", "team-a"), ("job-b", "team-b")):
            async for _ in runner.stub.RunPhase(pb.RunPhaseRequest(
                    job_id=job, phase_id="p1", project_id=project, prompt="hi", working_dir=str(runner.workdir)),
                    metadata=metadata(ADMIN_TOKEN), timeout=60):
                pass
        seen = await runner.stub.ListJobs(pb.ListJobsRequest(), metadata=metadata(TOKENS["viewer"]), timeout=10)
        assert [j.job_id for j in seen.jobs] == ["job-a"]
        foreign = await runner.stub.ListJobs(pb.ListJobsRequest(project_id="team-b"),
                                             metadata=metadata(TOKENS["viewer"]), timeout=10)
        assert list(foreign.jobs) == []
        everything = await runner.stub.ListJobs(pb.ListJobsRequest(), metadata=metadata(ADMIN_TOKEN), timeout=10)
        assert sorted(j.job_id for j in everything.jobs) == ["job-a", "job-b"]
        me = await runner.stub.WhoAmI(pb.WhoAmIRequest(), metadata=metadata(TOKENS["approver"]), timeout=10)
        assert me.principal.name == "approver@team-a"
        assert [(g.project_id, sorted(g.roles)) for g in me.principal.grants] == [("team-a", ["approver", "viewer"])]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.stub.GetJob(pb.GetJobRequest(job_id="job-a"), metadata=metadata("not-a-token"), timeout=10)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED

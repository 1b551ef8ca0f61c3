"""One phase's hand-over request with every field set: the value the stored fixtures in
tests/fixtures/handover/ hold, in each form a release wrote (``write_fixtures`` makes this release's)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import msgspec.structs

from helix_runner.domain.cost import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.domain.usage import TokenUsage
from helix_runner.phases.handover import SavedRequest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "handover"


def sample_request() -> SavedRequest:
    """A retried and moved phase with most options set: what request-msgspec-json.json holds (written by
    ``phases.handover.encode_request`` of main 4f034a8, the last release before the declared form)."""
    spec = PhaseSpec.create(job_id="job-1", phase_id="phase-1", project_id="proj", prompt="Fix the bug in main.py",
        working_dir="/srv/shared/repo", model="claude-sonnet-4-5", allowed_tools=("Read", "Bash(git *)"),
        disallowed_tools=("WebFetch",), permission_mode="acceptEdits", max_turns=12, max_budget_usd=2.5,
        append_system_prompt="Be brief.", timeout_s=600.0, idle_timeout_s=90.0, include_partial_messages=True,
        on_disconnect="DETACH", env=MappingProxyType({"FOO": "bar", "TOKEN": "s3cret"}), fallback_model="claude-haiku-4-5",
        memory_limit_bytes=512 * 1024 * 1024, cpu_limit_millicores=1500, workspace="GIT_WORKTREE", base_ref="main~1",
        worktree_retention="KEEP", add_dirs=("/srv/shared/docs",), effort="high", tools="Read,Edit,Bash",
        include_hook_events=True, mcp_config='{"mcpServers": {"files": {"command": "mcp-files"}}}', strict_mcp_config=True,
        agents='{"rev": {"description": "reviews", "prompt": "review it"}}', settings='{"model": "x"}',
        setting_sources="project,local", json_schema='{"type": "object"}', egress_allowlist=("pypi.org",),
        allow_repository_config_writes=True, pids_limit=256, api_features=())
    retry = RetryPolicy(max_attempts=4, initial_backoff_s=1.5, backoff_multiplier=3.0, max_backoff_s=30.0, jitter=False,
                        continuation_prompt="Go on.")
    cost = PhaseCostSnapshot(reported_usd=0.12, computed_usd=0.11, difference_usd=0.01, computed_only=False,
        tokens=TokenUsage(100, 200, 300, 40, 50, 1),
        models=(ModelCost("claude-sonnet-4-5", TokenUsage(100, 200, 300, 40, 50, 1), 0.12, 0.11, PricingSource.PRICE_TABLE),),
        unpriced_models=())
    attempts = (Attempt(number=1, status=PhaseStatus.FAILED, reason="API overloaded", end_kind=AttemptEndKind.API_OVERLOADED,
                        retryable=True, exit_code=1, api_error_status=529, session_id="0b7a1c1e-1111-4a4a-9a9a-123456789abc",
                        start_time_ns=1_764_900_000_000_000_001, end_time_ns=1_764_900_060_000_000_002, cost=cost,
                        first_sequence=1, last_sequence=40, retry_delay_ns=1_250_000_000, replica_id="replica-a"),
                Attempt(number=2, status=PhaseStatus.INTERRUPTED, reason="moved from replica replica-a (draining)",
                        end_kind=AttemptEndKind.MOVED, retryable=True, exit_signal="SIGTERM",
                        session_id="0b7a1c1e-1111-4a4a-9a9a-123456789abc",
                        resumed_session_id="0b7a1c1e-1111-4a4a-9a9a-123456789abc",
                        start_time_ns=1_764_900_061_000_000_000, end_time_ns=1_764_900_090_000_000_000,
                        first_sequence=41, last_sequence=77, replica_id="replica-a"))
    return SavedRequest(spec, retry, 1_764_899_999_000_000_000, attempts)


def full_request() -> SavedRequest:
    """``sample_request`` with the rest of the spec's fields set too (a fork's session options, bare):
    what request-v1.binpb holds. ``test_handover_codec`` checks every PhaseSpec field differs from its
    default here, so a field added to the spec is added to the stored form, or that test fails."""
    base = sample_request()
    spec = dataclasses.replace(
        base.spec, permission_mode="bypassPermissions", bare=True, system_prompt="You are careful.",
        resume_session_id="0b7a1c1e-1111-4a4a-9a9a-123456789abc", session_id="5d1f0e2a-2222-4b4b-8b8b-abcdefabcdef",
        fork_session=True, resume_session_at="9c3e4f5a-3333-4c4c-8c8c-0123456789ab", include_raw_unknown=True,
        no_session_persistence=True, api_features=("web_fetch", "mcp_servers"), workspace_max_bytes=64 << 20)
    spec.validate()
    return msgspec.structs.replace(base, spec=spec)


# PhaseSpec fields added after the first declared form: request-v1.binpb has none of them, and a row
# of that form reads each as its default.
ADDED_AFTER_V1 = {"workspace_max_bytes": 0}


def v1_request() -> SavedRequest:
    """What request-v1.binpb holds: ``full_request`` without the fields added since (ADDED_AFTER_V1)."""
    full = full_request()
    return msgspec.structs.replace(full, spec=dataclasses.replace(full.spec, **ADDED_AFTER_V1))


def write_fixtures() -> None:
    """Writes this release's fixture (run by hand when a new format is declared, never by a test):
    ``python -c "import sys; sys.path.insert(0, 'tests'); from support.handover_sample import write_fixtures; write_fixtures()"``."""
    from helix_runner.api.handover_codec import FORMAT, ProtoHandoverCodec

    (FIXTURES / f"request-v{FORMAT}.binpb").write_bytes(ProtoHandoverCodec().encode_request(full_request()))
    table = field_table()
    lines = [f"  {json.dumps(name)}: {{\n" + ",\n".join(f"    {json.dumps(n)}: {json.dumps(f)}" for n, f in fields.items())
             + "\n  }" for name, fields in sorted(table.items())]
    (FIXTURES / f"fields-v{FORMAT}.json").write_text("{\n" + ",\n".join(lines) + "\n}\n")


def field_table() -> dict[str, dict[str, list]]:
    """Every message the stored request is made of (the contract's included), by full name: each
    field's number with its name, type, whether it repeats and has presence, and its message or enum type, as this code declares them."""
    from helix.runner.internal.v1 import handover_pb2

    table: dict[str, dict[str, list]] = {}

    def walk(descriptor) -> None:
        if descriptor.full_name in table:
            return
        table[descriptor.full_name] = fields = {}
        for f in descriptor.fields:
            kind = f.message_type or f.enum_type
            fields[str(f.number)] = [f.name, f.type, f.is_repeated, f.has_presence, kind.full_name if kind else ""]
            if f.message_type is not None:
                walk(f.message_type)

    walk(handover_pb2.SavedPhaseRequest.DESCRIPTOR)
    return table

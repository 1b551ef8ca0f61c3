"""The Store protocol and its implementations agree: every method, with the same parameters."""

from __future__ import annotations

import inspect

import pytest

from helix_runner.store.postgres_store import PostgresStore
from helix_runner.store.protocol import Store
from helix_runner.store.sqlite_store import SqliteStore

PROTOCOL_METHODS = sorted(
    name for name, value in vars(Store).items() if inspect.isfunction(value) and not name.startswith("_")
)


def test_the_protocol_names_every_method_the_application_uses():
    assert PROTOCOL_METHODS == sorted([
        "active_phases", "append_events", "backfill_tool_call_durations", "close", "committer", "delete_jobs", "expired_jobs", "finished_recordings",
        "forget_recording", "get_job", "get_or_create_job", "get_phase", "insert_phase", "list_jobs",
        "list_tool_calls", "mark_tool_calls_unfinished", "model_cost_sums", "phase_cost_sums", "phases_of_jobs",
        "read_events", "referenced_recordings", "replace_model_costs", "tool_call_stats", "update_phase",
        "upsert_tool_calls", "write_phases",
        # webhooks (issue 26)
        "claim_webhook_deliveries", "create_webhook", "delete_webhook", "enqueue_webhooks", "finish_webhook_attempt",
        "get_webhook", "list_webhook_deliveries", "list_webhooks", "next_webhook_due_s", "release_webhook_claims",
        "replace_config_webhooks", "webhook_attempts",
        # checkpoints, forks (docs/fork-and-rewind.md)
        "get_phase_request", "list_checkpoints", "read_transcript", "save_phase_request",
        # the credential vault (docs/network.md)
        "delete_egress_secret", "list_egress_secrets", "put_egress_secret",
        # the audit trail (docs/tenancy.md)
        "append_audit", "list_audit",
        # per-project quotas (docs/tenancy.md)
        "get_quota", "project_spend", "put_quota",
        # egress allowances (docs/network.md)
        "add_egress_allowance", "delete_egress_allowance", "list_egress_allowances",
    ])  # fmt: skip


@pytest.mark.parametrize("implementation", [SqliteStore, PostgresStore])
@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_each_store_implements_each_method_with_the_same_parameters(implementation, name):
    wanted = inspect.signature(getattr(Store, name))
    have = inspect.signature(getattr(implementation, name))
    assert [(p.name, p.kind, p.default) for p in have.parameters.values()] == [
        (p.name, p.kind, p.default) for p in wanted.parameters.values()
    ]

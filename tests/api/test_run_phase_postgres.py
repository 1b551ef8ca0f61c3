"""RunPhase end to end on the PostgreSQL store: the real CLI, the real server, a shared database.

The same phase as on SQLite (tests/api/test_run_phase.py), with every write fenced and every
append notified: the events arrive gap-free, the database holds them, and another replica on the
same database answers for the phase.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.offline import Reply, Usage
from helix_runner.store.postgres_notify import CHANNEL
from helix_runner.store.postgres_store import PostgresStore

pytestmark = pytest.mark.real_cli


async def test_a_phase_runs_on_postgres_and_another_replica_answers_for_it(
        claude_binary, scripted_api, runner_factory, postgres_url):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo hello from bash"}),
        Reply.text("All done.", usage=Usage(input_tokens=200, output_tokens=10)),
    ])
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as listen:
        await listen.execute(f"LISTEN {CHANNEL}")
        async with runner_factory(api, database_url=postgres_url) as runner:
            events, result = await runner.run_phase("run a command", allowed_tools=["Bash"])
            assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            calls = (await runner.stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-1"), timeout=10)).tool_calls
            assert [(c.name, c.status) for c in calls] == [("Bash", res.TOOL_CALL_STATUS_SUCCEEDED)]

            other = PostgresStore(postgres_url, heartbeat=False)  # another replica, same database
            try:
                stored = other.read_events("job-1", "p1", 0, 1000)
                assert [e.sequence for e in stored] == [e.sequence for e in events]
                assert [e.body for e in stored] == [e.SerializeToString() for e in events]
                row = other.get_phase("job-1", "p1")
                assert row.status is PhaseStatus.SUCCEEDED and row.result_pb is not None
                assert other.cluster.phase_owner("job-1", "p1").replica_id == runner.server.cluster.replica_id
            finally:
                other.close()
        pointers = [json.loads(n.payload) async for n in listen.notifies(timeout=1)]
    assert pointers and max(p["s"] for p in pointers if p["p"] == "p1") == len(events)

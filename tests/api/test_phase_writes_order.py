"""What a crash can leave of a running phase is a prefix of its writes, in the order the run made them.

The real CLI runs a phase with a tool call on each store. After every commit the database is read
from another connection, as a server restarted after a crash right then would read it: a tool call
row names its starting event, which must be there; a phase row that names its session and model
(written when the CLI's init line is read) has that init event; a phase with its result has every
event. The server's writer keeps a run's row writes behind its events in one order (phases/event_log
EventWriter); before it, the row writes committed at once while the events of the same loop turn
waited for the turn's group commit, so a crash in between left rows naming events that were never
stored.
"""

from __future__ import annotations

import sqlite3
import threading

import psycopg
import pytest

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import resources_pb2 as resources
from helix_runner.offline import Reply, Usage
from helix_runner.store.sql_store import SqlStore
from helix_runner.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.real_cli


class CommitObserver:
    """Reads the committed state through a connection of its own after each commit; keeps what breaks the rule."""

    def __init__(self, database_url: str):
        self._lock = threading.Lock()
        if database_url.startswith("sqlite"):
            self._db = sqlite3.connect(database_url.removeprefix("sqlite://"), check_same_thread=False)
        else:
            self._db = psycopg.connect(database_url, autocommit=True)
        self.checks = 0
        self.rows_seen = 0
        self.violations: list[str] = []

    def check(self) -> None:
        with self._lock:
            self.checks += 1
            last = dict(((j, p), s) for j, p, s in self._db.execute(
                "SELECT job_id, phase_id, MAX(sequence) FROM events GROUP BY job_id, phase_id").fetchall())
            kinds = {(j, p, k) for j, p, k in self._db.execute("SELECT DISTINCT job_id, phase_id, kind FROM events")}
            for job, phase, tool, start in self._db.execute(
                    "SELECT job_id, phase_id, tool_use_id, start_sequence FROM tool_calls").fetchall():
                self.rows_seen += 1
                if start > last.get((job, phase), 0):
                    self.violations.append(f"tool call {tool} starts at event {start}; events stored up to "
                                           f"{last.get((job, phase), 0)}")
            for job, phase, session, result_pb in self._db.execute(
                    "SELECT job_id, phase_id, session_id, result_pb FROM phases").fetchall():
                if session and (job, phase, "session_init") not in kinds:
                    self.violations.append(f"{job}/{phase} names session {session}; its init event is not stored")
                if result_pb is not None:
                    final = resources.PhaseResult.FromString(bytes(result_pb)).last_sequence
                    if last.get((job, phase), 0) < final:
                        self.violations.append(f"{job}/{phase} has its result (last event {final}); "
                                               f"events stored up to {last.get((job, phase), 0)}")

    def close(self) -> None:
        self._db.close()


def observe_commits(monkeypatch, observer: CommitObserver) -> None:
    """Runs ``observer.check`` after every committing store call the server makes, whichever it uses."""

    def after(method):
        def checked(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            finally:
                observer.check()
        return checked

    for cls in (SqlStore, SqliteStore):
        for name in ("append_events", "update_phase", "upsert_tool_calls", "replace_model_costs", "write_phases"):
            if name in vars(cls):
                monkeypatch.setattr(cls, name, after(vars(cls)[name]))
    try:  # the writer's committers (a server from before them has none)
        from helix_runner.store.postgres_writer import PostgresCommitter
        from helix_runner.store.sqlite_store import SqliteCommitter
    except ImportError:
        return
    for cls in (PostgresCommitter, SqliteCommitter):
        monkeypatch.setattr(cls, "commit", after(cls.commit))


async def test_every_commit_leaves_a_prefix_of_the_phases_writes(
        claude_binary, scripted_api, runner_factory, database_url, monkeypatch):
    observer = CommitObserver(database_url)
    observe_commits(monkeypatch, observer)
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo one"}),
        Reply.tool_use("Bash", {"command": "echo two"}),
        Reply.text("All done.", usage=Usage(input_tokens=200, output_tokens=10)),
    ])
    try:
        async with runner_factory(api, database_url=database_url) as runner:
            events, result = await runner.run_phase("run two commands", allowed_tools=["Bash"])
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        observer.check()  # and the end state
    finally:
        observer.close()
    # The rule was checked while the rows it is about existed, after each of many commits.
    assert observer.checks > 5 and observer.rows_seen > 0
    assert observer.violations == []

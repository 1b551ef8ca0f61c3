"""AttemptProcess: each attempt's CLI supervisor and the API key its processes may have, without a process."""

from __future__ import annotations

from pathlib import Path

from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_stream import PhaseStreamOptions
from helix_runner.phases.attempt_process import AttemptProcess
from helix_runner.phases.handover import transcript_path
from helix_runner.phases.launch import LaunchPlan
from helix_runner.process.containment import subreaper_scope
from helix_runner.process.supervisor import ProcessLimits


class Broker:
    """The key broker's side: which pids were let have the key, and which still may."""

    def __init__(self) -> None:
        self.admitted: set[int] = set()
        self.asked: list[tuple[int, str, str]] = []

    def admit(self, pid: int, job_id: str, phase_id: str):
        self.asked.append((pid, job_id, phase_id))
        self.admitted.add(pid)
        return lambda: self.admitted.discard(pid)

    def cli_settings(self):
        return None


class Sink:
    def on_stdout(self, chunk: bytes) -> None: ...

    def on_stderr_line(self, line: bytes, truncated: bool) -> None: ...

    async def room(self) -> None: ...


def make(tmp_path: Path, broker: Broker | None):
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="proj", prompt="hi", working_dir=str(tmp_path))
    plan = LaunchPlan(spec=spec, project="proj", working_dir=tmp_path, argv=("claude", "-p"), cwd=tmp_path,
                      env={"HOME": str(tmp_path / "home")}, prompt_line=b"{}\n", limits=ProcessLimits(timeout=600),
                      claude_path="claude", recording_dir=tmp_path / "rec", stream_options=PhaseStreamOptions(),
                      scope=subreaper_scope(), key_broker=broker)
    pids: list[int] = []
    return AttemptProcess(spec, plan, Sink(), pids.append), pids


def test_a_spawned_attempt_is_recorded_and_has_the_key_until_it_ends(tmp_path):
    broker = Broker()
    process, pids = make(tmp_path, broker)
    process._spawned(4242)  # the supervisor's on_spawn
    assert pids == [4242] and broker.asked == [(4242, "j", "p")] and broker.admitted == {4242}
    process.revoke_key()
    assert broker.admitted == set()
    process.revoke_key()  # the run's end revokes again: nothing happens
    # The next attempt's process is admitted on its own spawn, and revoked on its own end.
    process.open_next(process.spec, time_left=0.2)
    process._spawned(4343)
    assert broker.admitted == {4343}
    process.revoke_key()
    assert broker.admitted == set()


def test_a_later_attempt_gets_the_time_the_phase_has_left(tmp_path):
    process, _ = make(tmp_path, None)
    first = process.supervisor
    process.open_next(process.spec, time_left=42.0)
    assert process.supervisor is not first and process.supervisor.limits.timeout == 42.0
    process.open_next(process.spec, time_left=0.01)
    assert process.supervisor.limits.timeout == 1.0  # at least a second, never zero or less
    process._spawned(1)  # no key broker: nothing to admit, nothing to revoke
    process.revoke_key()


def test_without_a_sandbox_a_session_file_is_where_the_cli_config_points(tmp_path):
    process, _ = make(tmp_path, None)
    assert process.session_file("s1") == transcript_path(process.plan.env, process.plan.cwd, "s1")

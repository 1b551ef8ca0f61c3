"""The phase's private home (process/sandbox/private_home.py): its transcripts kept for resume, and
not kept when the phase made them larger than the server keeps."""

from __future__ import annotations

from helix_runner.process.sandbox.private_home import PrivateHome, SessionStore, project_dir_name

SESSION = "0b6f3c1e-1111-4222-8333-444455556666"


def home_with_transcript(tmp_path, size: int) -> PrivateHome:
    home = PrivateHome(tmp_path / "run")
    home.create(None)
    project = home.config / "projects" / project_dir_name("/w/repo")
    project.mkdir(parents=True)
    (project / f"{SESSION}.jsonl").write_bytes(b"x" * size)
    (project / SESSION).mkdir()  # its subagents' directory
    (project / SESSION / "agent.jsonl").write_bytes(b"y" * size)
    return home


def test_a_transcript_is_kept_for_the_project_to_resume(tmp_path):
    store = SessionStore(tmp_path / "sessions")
    assert store.save("proj", home_with_transcript(tmp_path, 10_000), max_bytes=1 << 20) == [SESSION]
    assert store.owner(SESSION) is not None


def test_a_transcript_the_phase_inflated_past_the_cap_is_not_kept(tmp_path):
    """The phase writes its transcripts itself; what is kept stays in the data dir for good."""
    store = SessionStore(tmp_path / "sessions")
    assert store.save("proj", home_with_transcript(tmp_path, 1 << 20), max_bytes=1 << 20) == []
    assert store.owner(SESSION) is None

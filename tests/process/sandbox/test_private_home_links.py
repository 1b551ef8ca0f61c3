"""What the server keeps of a phase's private home never comes from outside it (process/sandbox/
private_home.py, process/beneath.py).

At the end of a phase the server moves its session transcripts from ``<home>/.claude/projects/*/``
into the project's store, for a later phase of the project to resume. The phase owns its home: it
can make ``projects`` (or ``.claude``) a link to any directory the server can reach, or swap it for
one while the server works. Before, the server followed the link and *moved* every file there that
looked like a session (``<dir>/<name>.jsonl``, ``<dir>/<name>/``) out of that directory into the
store: a host directory emptied, another phase's live transcripts taken, and the files handed to
the attacker's project on its next resume. Also: a transcript restored for a rewind or an adoption
was written through a link in its directories.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helix_runner.phases.handover import restore_transcript
from helix_runner.process.beneath import NotBeneath
from helix_runner.process.sandbox.private_home import PrivateHome, SessionStore, project_dir_name

SESSION = "0b6f3c1e-1111-4222-8333-444455556666"
VICTIM = "9d1e0f00-aaaa-4bbb-8ccc-ddddeeeeffff"
SECRET = b'{"secret": "another phase\'s transcript"}\n'


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A phase's home with a transcript of its own, and outside it a directory shaped like a
    projects directory (another phase's home, say) with a transcript and a subagent directory."""
    home = PrivateHome(tmp_path / "homes" / "run")
    home.create(None)
    own = home.config / "projects" / project_dir_name("/w/repo")
    own.mkdir(parents=True)
    (own / f"{SESSION}.jsonl").write_bytes(b'{"type":"user"}\n')
    outside = tmp_path / "other-home" / "projects"
    (outside / "-w-victim" / VICTIM).mkdir(parents=True)
    (outside / "-w-victim" / f"{VICTIM}.jsonl").write_bytes(SECRET)
    (outside / "-w-victim" / VICTIM / "agent.jsonl").write_bytes(SECRET)
    return {"home": home.root, "own": own, "outside": outside, "store": tmp_path / "sessions"}


def outside_files(outside: Path) -> list[str]:
    return sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))


def kept_bytes(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()) if store.is_dir() else b""


def test_projects_made_a_link_moves_nothing_from_where_it_points(layout):
    home = PrivateHome(layout["home"])
    before = outside_files(layout["outside"])
    projects = home.config / "projects"
    os.rename(projects, home.config / "projects.own")
    projects.symlink_to(layout["outside"])
    store = SessionStore(layout["store"])
    kept = store.save("attacker", home)
    assert outside_files(layout["outside"]) == before, "the server moved files out of a directory outside the home"
    assert VICTIM not in kept
    assert SECRET not in kept_bytes(layout["store"])
    assert store.owner(VICTIM) is None


def test_the_config_directory_made_a_link_moves_nothing_either(layout):
    home = PrivateHome(layout["home"])
    before = outside_files(layout["outside"])
    os.rename(home.config, home.home / "claude-own")
    home.config.symlink_to(layout["outside"].parent)
    SessionStore(layout["store"]).save("attacker", home)
    assert outside_files(layout["outside"]) == before
    assert SECRET not in kept_bytes(layout["store"])


def test_the_transcript_locator_lists_no_session_through_a_link(layout):
    home = PrivateHome(layout["home"])
    assert set(home.transcripts()) == {SESSION}
    projects = home.config / "projects"
    os.rename(projects, home.config / "projects.own")
    projects.symlink_to(layout["outside"])
    assert home.transcripts() == {}


def test_projects_swapped_for_a_link_while_the_server_moves_moves_the_phases_own(layout, monkeypatch):
    """The race: the server has looked at the home (no link), then the phase renames ``projects``
    away and puts a link to the other directory in its place, right before the move."""
    home = PrivateHome(layout["home"])
    before = outside_files(layout["outside"])
    projects = home.config / "projects"
    # A look-alike of the victim's layout in the phase's own home, so the server finds a session of
    # the same name when it looks, and the swap redirects exactly that move.
    (layout["own"] / f"{SESSION}.jsonl").unlink()  # one session, so the swap is before its move
    (projects / "-w-victim").mkdir()
    (projects / "-w-victim" / f"{VICTIM}.jsonl").write_bytes(b'{"own": "bait"}\n')
    real_rename = os.rename
    swapped = []

    def rename_after_the_swap(*args, **kwargs):
        if not swapped and VICTIM in str(args[0]):
            swapped.append(True)
            real_rename(projects, home.config / "projects.own")
            projects.symlink_to(layout["outside"])
        return real_rename(*args, **kwargs)

    monkeypatch.setattr(os, "rename", rename_after_the_swap)
    kept = SessionStore(layout["store"]).save("attacker", home)
    monkeypatch.undo()
    assert swapped and kept == [VICTIM]
    assert outside_files(layout["outside"]) == before, "the swap redirected the server's move outside the home"
    assert kept_bytes(layout["store"]) == b'{"own": "bait"}\n'


def test_the_phases_own_transcripts_are_still_kept(layout):
    store = SessionStore(layout["store"])
    assert store.save("proj", PrivateHome(layout["home"])) == [SESSION]
    assert kept_bytes(layout["store"]) == b'{"type":"user"}\n'


def test_a_transcript_restored_into_the_home_is_not_written_through_a_link(layout):
    """A rewind writes the cut transcript back where the phase's CLI reads it: a directory on the
    way that the phase made a link must not carry the write elsewhere."""
    home = PrivateHome(layout["home"])
    projects = home.config / "projects"
    os.rename(projects, home.config / "projects.own")
    projects.symlink_to(layout["outside"])
    target = projects / "-w-victim" / f"{VICTIM}.jsonl"
    with pytest.raises(NotBeneath):
        restore_transcript(b'{"planted": true}\n', target)
    assert (layout["outside"] / "-w-victim" / f"{VICTIM}.jsonl").read_bytes() == SECRET


def test_a_transcript_restored_makes_its_directories(layout):
    home = PrivateHome(layout["home"])
    target = home.config / "projects" / "-w-new" / f"{SESSION}.jsonl"
    restore_transcript(b"line\n", target)
    assert target.read_bytes() == b"line\n"
    assert (target.parent.stat().st_mode & 0o777) == 0o700
    assert (target.stat().st_mode & 0o777) == 0o600

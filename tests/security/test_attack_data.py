"""Files of the server and of other phases, read or changed from inside a phase.

Everything the server's user can open, a phase can: the data dir (database, recordings, the files
that hand a phase its secret options), other workspaces, the CLI's session transcripts, the server's
HOME and installed package; and the server itself writes where a phase points it.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]

READS = {
    "sqlite_copy": ("vprompt", "vtool"),  # a copy of the database and its WAL: another job's prompt, tool output
    "recordings": ("vtool",),  # another phase's raw recording
    "phase_option_files": ("vmcp",),  # the file handing another phase its --mcp-config (a bearer token)
    "session_transcript": ("vprompt",),  # another CLI's session transcript
    "other_workspace": ("vfile",),  # a file in another job's workspace
    "other_workspace_0600": ("vsecret",),  # ... and one only its owner may read (0600)
    "via_victim_cwd": ("vsecret",),  # ... through /proc/<victim CLI>/cwd instead of its path
    "via_server_root": ("vsecret",),  # ... through /proc/<server>/root, the server's view of the host
}


@pytest.mark.parametrize("probe", READS)
def test_a_phase_cannot_read_other_phases_data(attacked, probe):
    leaked = [role for role in READS[probe] if attacked.secrets[role] in attacked.found(probe)]
    assert not leaked, attacked.describe(probe)


WRITES = ("write_server_home", "write_other_workspace", "write_workspace_root", "write_data_dir",
          "write_server_package")


@pytest.mark.parametrize("probe", WRITES)
def test_a_phase_cannot_write_outside_its_workspace(attacked, probe):
    """A file created in the server's HOME, another workspace, the workspace root, the data dir or
    the server's package / site-packages (a ``.pth`` file there runs at every start of its Python);
    checked from outside after the phase ended."""
    attacked.probe(probe)
    assert attacked.effects["written"][probe] == [], attacked.describe(probe)


def test_a_phase_cannot_change_another_job_s_records(attacked):
    """An UPDATE of the victim's prompt in the live SQLite database, read back from outside."""
    attacked.probe("tamper_database")
    prompts = attacked.effects["victim_prompt_in_db"]
    assert prompts and not any(attacked.secrets["tamper"] in p for p in prompts), (
        prompts, attacked.describe("tamper_database"))


def test_the_server_writes_no_phase_file_through_a_planted_symlink(attacked):
    """The phase's own ``diff.patch`` (in its recording directory) made a symlink to another
    workspace's file: the server, writing the phase's diff when it ends, must not write through it."""
    attacked.probe("symlink_diff_file")
    assert not attacked.effects["canary_changed"], attacked.describe("symlink_diff_file")


def test_symlinks_in_the_workspace_do_not_carry_other_files_into_artifacts(attacked):
    """Symlinks from the workspace to another workspace's files: the phase's diff (its result's
    artifacts and GetPhaseDiff, which go back to the attacker's caller) must not hold their contents."""
    attacked.probe("workspace_symlinks")
    leaked = {attacked.secrets["vsecret"], attacked.secrets["vfile"]} & set(attacked.effects["artifact_evidence"])
    assert not leaked, attacked.effects["artifact_evidence"]

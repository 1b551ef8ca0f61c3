"""The host beyond the file allowlist: devices, shared memory, terminals, other command lines.

What other processes of the server's user hold outside any file the phase may open by path: POSIX
shared memory in ``/dev/shm``, SysV segments, another session's terminal, a raw block device (root
only: its owner bits are root's), and another phase's CLI command line in ``/proc``.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]

# probe -> the secret whose return proves the read
READS = {
    "dev_shm": "shm",  # /dev/shm/<name>, 0600, of the server's user
    "sysv_shm": "sysv",  # a SysV segment of the server's user, listed in /proc/sysvipc/shm
    "block_device": "blockdev",  # a loop device over an image holding the marker
    "victim_cmdline": "vsys",  # the victim's --append-system-prompt, in /proc/<pid>/cmdline
}


@pytest.mark.parametrize("probe", READS)
def test_a_phase_cannot_read_what_other_processes_hold(attacked, probe):
    assert attacked.secrets[READS[probe]] not in attacked.found(probe), attacked.describe(probe)


def test_a_phase_cannot_write_to_another_session_s_terminal(attacked):
    """A pty of the server's user standing in for an operator's shell: what the phase wrote must not
    show on it (read at its master from outside)."""
    attacked.probe("other_terminal")
    output = attacked.effects["terminal_output"]
    assert attacked.secrets["tty"].encode() not in output, (output, attacked.describe("other_terminal"))

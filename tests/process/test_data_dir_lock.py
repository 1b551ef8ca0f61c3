"""The data directory's lock: one live server per data directory, freed when its holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helix_runner.process.data_dir_lock import LOCK_NAME, DataDirInUse, DataDirLock


def test_a_second_holder_is_refused_with_the_first_ones_pid_until_it_releases(tmp_path):
    first = DataDirLock.acquire(tmp_path)
    with pytest.raises(DataDirInUse) as refused:
        DataDirLock.acquire(tmp_path)
    assert refused.value.pid == os.getpid()
    assert str(refused.value) == (f"the data directory {tmp_path} is in use by another helix-runner server "
                                  f"(pid {os.getpid()}); give this one its own --data-dir")
    first.release()
    first.release()  # idempotent
    DataDirLock.acquire(tmp_path).release()
    assert (tmp_path / LOCK_NAME).exists()  # kept: an unlinked lock file would let two servers lock two files


def test_the_lock_of_a_killed_holder_is_free_at_once(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from helix_runner.process.data_dir_lock import DataDirLock; "
         "DataDirLock.acquire(__import__('pathlib').Path(sys.argv[1])); print('held', flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirInUse) as refused:
            DataDirLock.acquire(tmp_path)
        assert refused.value.pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    deadline = time.monotonic() + 5
    while True:  # the kernel drops a dead process's flock when its last descriptor closes
        try:
            DataDirLock.acquire(tmp_path).release()
            break
        except DataDirInUse:
            assert time.monotonic() < deadline
            time.sleep(0.02)

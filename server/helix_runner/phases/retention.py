"""Retention: keeps the database and the recordings from growing forever on a fixed volume.

Two rules, each off when its setting is 0, applied by a background sweep every
``retention_interval_seconds`` (and once at startup):

- by age (``retention_days``): a job untouched for that long whose phases have all finished is
  deleted with everything it has (phases, events, tool calls, costs, recordings);
- by size (``recordings_max_bytes``): while the recordings of finished phases exceed the cap, the
  oldest are deleted; their phases stay in the database (the result names the recording path,
  which then no longer exists).

A running phase is never touched. Every sweep logs one ``retention sweep`` line with what it
removed and what is left.

On a database shared by replicas (``shared``) each replica's recordings are on its own disk: the
size rule counts and deletes only the recordings present here (another replica's are its own
sweep's business, and are never forgotten from here), and as any replica may delete an expired job
first, the age rule also removes recordings here that no phase row names any more and that are
older than the age limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from helix_runner.process.beneath import remove_tree
from helix_runner.process.checkpoint_git import delete_refs
from helix_runner.process.git_worktree import GitError
from helix_runner.store.protocol import Store

log = logging.getLogger(__name__)

# Jobs deleted per transaction: the store's lock is held for one batch, never for the whole sweep.
BATCH = 100


@dataclass(frozen=True)
class RetentionPolicy:
    """The configured limits (0 = no limit)."""

    max_age_s: float = 0.0
    recordings_max_bytes: int = 0
    interval_s: float = 3600.0

    @property
    def enabled(self) -> bool:
        return self.max_age_s > 0 or self.recordings_max_bytes > 0


@dataclass(frozen=True)
class SweepReport:
    """What one sweep removed, and how large the recordings are afterwards."""

    jobs_deleted: int = 0
    phases_deleted: int = 0
    recordings_deleted: int = 0
    bytes_freed: int = 0
    recordings_bytes: int = 0
    errors: int = 0


class RetentionSweeper:
    """Applies a ``RetentionPolicy`` to one store and its recordings directory."""

    def __init__(
        self,
        store: Store,
        recordings_dir: Path,
        policy: RetentionPolicy,
        clock_ns: Callable[[], int] = time.time_ns,
        *,
        shared: bool = False,
    ):
        self.store = store
        self.recordings_base = recordings_dir  # as phase rows name it (config.recordings_dir)
        self.recordings_dir = recordings_dir.resolve()
        self.policy = policy
        self.clock_ns = clock_ns
        self.shared = shared

    def sweep(self) -> SweepReport:
        """One pass of both rules (blocking: run it in a thread)."""
        jobs = phases = recordings = freed = errors = 0
        if self.policy.max_age_s > 0:
            cutoff = self.clock_ns() - int(self.policy.max_age_s * 1e9)
            while batch := self.store.expired_jobs(cutoff, BATCH):
                refs = self._checkpoint_refs([job for job, _ in batch])  # read before their rows go
                phases += self.store.delete_jobs([job for job, _ in batch])
                jobs += len(batch)
                for repository, job_id, phase_id in refs:  # worktree checkpoints' hidden refs go too
                    try:
                        delete_refs(Path(repository), job_id, phase_id)
                    except (GitError, OSError):
                        errors += 1
                for _, dirs in batch:
                    for d in dirs:
                        size, ok = self._remove(d)
                        freed += size
                        recordings += ok and size > 0
                        errors += not ok
            for d in self._orphans(cutoff):
                size, ok = self._remove(d)
                freed += size
                recordings += ok and size > 0
                errors += not ok
        total = self._recordings_bytes()
        if self.policy.recordings_max_bytes > 0 and total > self.policy.recordings_max_bytes:
            finished = self.store.finished_recordings()
            if self.shared:  # only those on this replica's disk (see the module's docstring)
                finished = [row for row in finished if Path(row[2]).is_dir()]
            for job_id, phase_id, d in finished:
                if total <= self.policy.recordings_max_bytes:
                    break
                size, ok = self._remove(d)
                if ok:
                    self.store.forget_recording(job_id, phase_id)
                    recordings += 1
                    freed += size
                    total -= size
                else:
                    errors += 1
        return SweepReport(jobs, phases, recordings, freed, total, errors)

    def _checkpoint_refs(self, job_ids: list[str]) -> set[tuple[str, str, str]]:
        """(repository, job, phase) of these jobs' phases whose checkpoints hold hidden refs."""
        out = set()
        for row in self.store.phases_of_jobs(job_ids):
            for c in self.store.list_checkpoints(row.job_id, row.phase_id):
                if c.workspace.ref and c.workspace.repository:
                    out.add((c.workspace.repository, row.job_id, row.phase_id))
        return out

    async def run(self) -> None:
        """Sweeps now and then every interval, until cancelled; a failing sweep is logged, not fatal."""
        while True:
            started = time.monotonic()
            try:
                report = await asyncio.to_thread(self.sweep)
            except Exception:
                log.exception("retention sweep failed")
            else:
                log.info(
                    "retention sweep",
                    extra={
                        "fields": {
                            **report.__dict__,
                            "seconds": round(time.monotonic() - started, 3),
                            "max_age_s": self.policy.max_age_s,
                            "recordings_max_bytes": self.policy.recordings_max_bytes,
                        }
                    },
                )
            await asyncio.sleep(self.policy.interval_s)

    def _orphans(self, cutoff_ns: int) -> list[str]:
        """Recordings here older than ``cutoff_ns`` that no phase row names (their job was deleted,
        perhaps by another replica's sweep, or a sweep stopped between the rows and the files)."""
        old = self._recordings_older_than(cutoff_ns)
        if not old:
            return []
        named = self.store.referenced_recordings(old)
        return [d for d in old if d not in named]

    def _recordings_older_than(self, cutoff_ns: int) -> list[str]:
        """``<recordings>/<job>/<phase>-<run>`` directories whose newest entry is older than the cutoff."""
        out = []
        with contextlib.suppress(OSError):
            for job_dir in sorted(self.recordings_base.iterdir()):
                if not job_dir.is_dir() or job_dir.is_symlink():
                    continue
                for run_dir in sorted(job_dir.iterdir()):
                    with contextlib.suppress(OSError):  # removed meanwhile
                        if run_dir.is_dir() and not run_dir.is_symlink() and _newest_ns(run_dir) < cutoff_ns:
                            out.append(str(run_dir))
        return out

    def _remove(self, recording_dir: str) -> tuple[int, bool]:
        """Deletes one recording directory; (bytes freed, whether it is gone). Only inside the recordings dir."""
        path = Path(recording_dir).resolve()
        if not path.is_relative_to(self.recordings_dir) or path == self.recordings_dir:
            log.warning(
                "not deleting a recording outside the recordings directory",
                extra={"fields": {"path": recording_dir}},
            )
            return 0, False
        size = _tree_bytes(path)
        try:
            remove_tree(path)  # by directory descriptors: a link in the recording is removed, not followed
        except OSError as exc:
            log.warning("cannot delete a recording", extra={"fields": {"path": str(path), "error": str(exc)}})
            return 0, False
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # the job's directory, once its last recording is gone
        return size, True

    def _recordings_bytes(self) -> int:
        return _tree_bytes(self.recordings_dir)


def _newest_ns(directory: Path) -> int:
    """The newest modification time of a directory and the entries directly in it (a recording is flat)."""
    newest = directory.stat().st_mtime_ns
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime_ns)
    return newest


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total

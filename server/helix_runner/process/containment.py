"""Containment: every process a phase starts is tracked, frozen, and ended with its phase.

The CLI runs each Bash tool command in a session of its own, and tools may double-fork,
``setsid`` or ``nohup``; signalling the CLI's process group reaches none of them. So a phase
runs in a scope the kernel keeps whatever those processes do:

- a cgroup per phase, where the server may create one: v2 (``cgroup.kill``, ``cgroup.freeze``)
  or the v1 freezer, with memory and CPU limits from the v2 controllers or the v1 memory / cpu
  hierarchies (``process/cgroups.py``);
- otherwise (a container without delegation) a per-phase shim that is a child subreaper, so
  orphans re-parent to it and are found as its descendants in ``/proc`` (``process/phase_shim.py``).

Both start the CLI through the shim, which also ends the phase's processes if the server dies
(parent-death signal), and gives every process the environment entry
``HELIX_RUNNER_SCOPE=<instance>.<run id>`` so a restarted server can find strays that left the
tree. ``detect`` picks the mechanism once at start (``containment = auto | cgroup | cgroup-v2 |
cgroup-v1 | subreaper``); ``Containment.recover`` ends what a crashed server left.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from helix_runner.domain.phase_result import ContainmentMode, ContainmentReport
from helix_runner.process import phase_shim, procfs
from helix_runner.process.cgroups import (
    CgroupError,
    Hierarchy,
    PhaseCgroup,
    ResourceLimits,
    Role,
    discover,
    enable_controllers,
)

log = logging.getLogger(__name__)

SETTINGS = ("auto", "cgroup", "cgroup-v2", "cgroup-v1", "subreaper")
MARKER_NAME = "HELIX_RUNNER_SCOPE"
SHIM_PATH = Path(phase_shim.__file__).resolve()
_PR_GET_CHILD_SUBREAPER = 37
_POLL_S = 0.005


MODE_NAMES = {
    ContainmentMode.CGROUP_V2: "cgroup-v2",
    ContainmentMode.CGROUP_V1: "cgroup-v1",
    ContainmentMode.SUBREAPER: "subreaper",
}


class ContainmentError(Exception):
    """Containment cannot be set up (at start) or cannot give a phase what it asks; one line for a person."""


@dataclass(frozen=True)
class ScopeStats:
    """A phase's processes and memory right now (or at its end)."""

    processes: int = 0
    memory_current_bytes: int | None = None
    memory_peak_bytes: int | None = None
    oom_kills: int = 0


@dataclass(frozen=True)
class LeftoverRun:
    """A phase a previous server left active: its run id and the shim it recorded."""

    run_id: str
    shim_pid: int | None = None
    shim_start_ticks: int | None = None


def instance_id(data_dir: Path) -> str:
    """Names this server's cgroups and markers: one per data directory, stable across restarts."""
    return "srv-" + hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]


def shim_command(
    argv: Sequence[str],
    *,
    status_fd: int = -1,
    joins: Sequence[Path] = (),
    marker: str = "",
    parent: int | None = None,
    sandbox: Sequence[str] = (),
    file_bytes: int | None = None,
) -> list[str]:
    """The command line that runs ``argv`` under the phase shim, as a child of ``parent`` (default:
    this process; the shim exits at once if its parent is not that one any more)."""
    cmd = [
        sys.executable,
        "-E",
        "-s",
        "-S",
        "-B",
        str(SHIM_PATH),
        "--status-fd",
        str(status_fd),
        "--parent",
        str(os.getpid() if parent is None else parent),
    ]
    for path in joins:
        cmd += ["--join", str(path)]
    if marker:
        cmd += ["--marker", marker]
    if file_bytes:
        cmd += ["--fsize", str(file_bytes)]
    return [*cmd, *sandbox, "--", *argv]


def _alive(pid: int | None, start: int | None = None) -> bool:
    """Whether ``pid`` is a live process (and, given its start ticks, still the same one)."""
    if not pid:
        return False
    fields = procfs.stat_fields(pid)
    if not fields or fields[0] == "Z":
        return False
    return start is None or int(fields[19]) == start


async def _kill_tree(root: int, root_start: int | None, limit_s: float = 10.0) -> int:
    """SIGKILLs every descendant of a live subreaper until none is left; returns how many."""
    killed: set[int] = set()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and _alive(root, root_start):
        victims = procfs.descendants(root)
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        await asyncio.sleep(_POLL_S)
    return len(killed)


def _kill_marked(marker: bytes) -> int:
    """SIGKILLs processes whose environment carries the marker (strays that left the tree)."""
    strays = procfs.marked(marker)
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(strays)


async def _wait_stopped(pids: Sequence[int], limit_s: float = 2.0) -> bool:
    """Waits until every listed process shows as stopped (delivery of SIGSTOP is asynchronous)."""
    deadline = time.monotonic() + limit_s
    while True:
        if all(procfs.process_state(p) in ("T", "t", "Z", None) for p in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)


class PhaseScope:
    """One phase run's containment: its cgroup (if any), its shim, its marker."""

    def __init__(self, containment: Containment, run_id: str, limits: ResourceLimits):
        self.containment = containment
        self.run_id = run_id
        self.limits = limits
        self.marker = f"{MARKER_NAME}={containment.instance}.{run_id}"
        self.cgroup: PhaseCgroup | None = None
        if containment.core is not None:
            self.cgroup = PhaseCgroup(
                containment.core, f"phase-{run_id}", containment.memory, containment.cpu, limits,
                pids=containment.pids,
            )
        self.shim_pid: int | None = None
        self.shim_start: int | None = None
        # The shim's `--sandbox` argument (process/sandbox/phase_sandbox.py); empty: no sandbox.
        self.sandbox_args: list[str] = []
        self.stopped = False
        self._final: ScopeStats | None = None

    @property
    def mode(self) -> ContainmentMode:
        return self.containment.mode

    @property
    def paths(self) -> list[str]:
        return [str(d) for d in self.cgroup.dirs] if self.cgroup else []

    def describe(self) -> str:
        where = ", ".join(self.paths) if self.cgroup else "a subreaper shim"
        return f"{MODE_NAMES[self.mode]} ({where}; {self.limits.describe()})"

    def create(self) -> None:
        """Makes the cgroup with its limits (before the shim starts)."""
        if self.cgroup is not None:
            try:
                self.cgroup.create()
            except CgroupError as exc:
                raise ContainmentError(str(exc)) from None

    def command(self, argv: Sequence[str], status_fd: int) -> list[str]:
        """The shim's command line for this scope."""
        joins = self.cgroup.procs_files if self.cgroup else ()
        return shim_command(argv, status_fd=status_fd, joins=joins, marker=self.marker, sandbox=self.sandbox_args,
                            file_bytes=self.limits.file_bytes)

    def attach(self, shim_pid: int) -> None:
        self.shim_pid = shim_pid
        self.shim_start = procfs.start_ticks(shim_pid)

    def processes(self) -> list[int]:
        """The live processes of the phase (the shim included)."""
        if self.cgroup is not None:
            return self.cgroup.live_members()
        if not _alive(self.shim_pid, self.shim_start):
            return []
        return [self.shim_pid, *procfs.descendants(self.shim_pid)]  # type: ignore[list-item]

    async def stop_all(self) -> None:
        """Hard pause: SIGSTOPs every process of the phase but the shim; returns once they show stopped."""
        exclude = frozenset({self.shim_pid} if self.shim_pid else ())
        self.stopped = True
        stopped: set[int] = set()
        if self.cgroup is not None:
            stopped.update(await self._cgroup_op(self.cgroup.signal_all(signal.SIGSTOP, exclude)))
        # Without a cgroup, and as a second pass with one: until a snapshot finds no running process
        # (a stopped parent forks no more, so this ends).
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            running = [
                p
                for p in self.processes()
                if p not in exclude and procfs.process_state(p) not in ("T", "t", "Z", None)
            ]
            if not running:
                break
            for pid in running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.add(pid)
            await _wait_stopped(running, 1.0)
        await _wait_stopped(sorted(stopped))

    async def continue_all(self) -> None:
        """Resume: SIGCONTs every process of the phase."""
        self.stopped = False
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    async def kill(self) -> int:
        """Ends every process of the phase, the shim included; returns how many were killed."""
        killed = 0
        if self.cgroup is not None:
            killed += await self.cgroup.kill()
        elif self.shim_pid is not None:
            if _alive(self.shim_pid, self.shim_start):
                killed += await _kill_tree(self.shim_pid, self.shim_start)
            else:
                # The shim died before its phase: its orphans left the tree but keep the marker.
                killed += _kill_marked(self.marker.encode())
        if _alive(self.shim_pid, self.shim_start):
            # It has no descendant left; this makes it check again and exit.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.shim_pid, phase_shim.END_SIGNAL)  # type: ignore[arg-type]
        self.stopped = False
        return killed

    async def _cgroup_op(self, op):
        try:
            return await op
        except CgroupError as exc:
            log.warning(
                "cgroup operation failed", extra={"fields": {"run_id": self.run_id, "error": str(exc)}}
            )
            return []

    def oom_kills(self) -> int:
        return self.cgroup.oom_kills() if self.cgroup else 0

    def pids_refused(self) -> int:
        """Forks refused at the phase's process limit (0 without a pids cgroup)."""
        return self.cgroup.pids_refused() if self.cgroup else 0

    def stats(self) -> ScopeStats:
        if self._final is not None:
            return self._final
        cg = self.cgroup
        return ScopeStats(
            processes=len(self.processes()),
            memory_current_bytes=cg.memory_current() if cg else None,
            memory_peak_bytes=cg.memory_peak() if cg else None,
            oom_kills=cg.oom_kills() if cg else 0,
        )

    def report(self) -> ContainmentReport:
        """The containment of this phase with its live (or final) numbers."""
        stats = self.stats()
        return ContainmentReport(
            mode=self.mode,
            cgroup_paths=tuple(self.paths),
            memory_limit_bytes=self.limits.memory_bytes,
            cpu_limit_millicores=self.limits.cpu_millicores,
            process_count=stats.processes,
            memory_current_bytes=stats.memory_current_bytes,
            memory_peak_bytes=stats.memory_peak_bytes,
            oom_kills=stats.oom_kills,
        )

    def close(self) -> ScopeStats:
        """Records the final numbers and removes the (empty) cgroup."""
        if self._final is None:
            stats = self.stats()
            self._final = ScopeStats(0, None, stats.memory_peak_bytes, stats.oom_kills)
            if self.cgroup is not None and not self.cgroup.remove():
                log.warning("phase cgroup not removed", extra={"fields": {"paths": self.paths}})
        return self._final


class Containment:
    """The server's containment mechanism; one ``PhaseScope`` per phase run."""

    def __init__(
        self,
        mode: ContainmentMode,
        instance: str,
        detail: str,
        *,
        core: Role | None = None,
        memory: Role | None = None,
        cpu: Role | None = None,
        hierarchies: Sequence[Hierarchy] = (),
        cgroup_parent: str = "",
        pids: Role | None = None,
    ):
        self.mode = mode
        self.instance = instance
        self.detail = detail
        self.core = core
        self.memory = memory
        self.cpu = cpu
        self.pids = pids
        self._hierarchies = list(hierarchies)
        self._cgroup_parent = cgroup_parent

    @property
    def limits_available(self) -> tuple[str, ...]:
        """Which limits a phase may ask for: ``memory``, ``cpu``, ``pids``."""
        return tuple(name for name, role in (("memory", self.memory), ("cpu", self.cpu), ("pids", self.pids))
                     if role is not None)

    def check_limits(self, limits: ResourceLimits) -> None:
        """ContainmentError naming a limit this server cannot enforce."""
        for name, value in (("memory", limits.memory_bytes), ("cpu", limits.cpu_millicores)):
            if value and name not in self.limits_available:
                raise ContainmentError(
                    f"this server cannot enforce a {name} limit ({MODE_NAMES[self.mode]} containment: "
                    f"{self.detail})"
                )

    def scope(self, run_id: str, limits: ResourceLimits | None = None) -> PhaseScope:
        return PhaseScope(self, run_id, limits or ResourceLimits())

    # -- recovery --------------------------------------------------------------------------

    def _instance_dirs(self) -> list[tuple[int, Path]]:
        """This instance's directory in every mounted hierarchy (whatever the mode now), those that
        can freeze first (v2, the v1 freezer): they end the processes, the others are then empty."""
        out = []
        for h in sorted(self._hierarchies, key=lambda h: h.version != 2 and "freezer" not in h.controllers):
            d = _instance_dir(h, self._cgroup_parent, self.instance)
            if d is not None and d.is_dir():
                out.append((h.version, d))
        return out

    async def recover(self, runs: Sequence[LeftoverRun]) -> dict[str, int]:
        """Ends every process a previous server of this instance left; returns processes ended per run id.

        Three nets: a recorded shim still alive (its descendants, then it), this instance's phase
        cgroups in every hierarchy (then removed), and processes carrying this instance's marker.
        """
        ended: dict[str, int] = {}

        def add(run_id: str, n: int) -> None:
            if n:
                ended[run_id] = ended.get(run_id, 0) + n

        for run in runs:
            if _alive(run.shim_pid, run.shim_start_ticks):
                add(run.run_id, await _kill_tree(run.shim_pid, run.shim_start_ticks))  # type: ignore[arg-type]
                with contextlib.suppress(ProcessLookupError):
                    os.kill(run.shim_pid, signal.SIGKILL)  # type: ignore[arg-type]
                    add(run.run_id, 1)
        for version, base in self._instance_dirs():
            try:
                found = sorted(base.iterdir())
            except FileNotFoundError:  # pruned since it was listed: nothing of this instance is in it
                continue
            for d in found:
                if not (d.is_dir() and d.name.startswith("phase-")):
                    continue
                cg = PhaseCgroup(Role(version, base), d.name)
                add(d.name.removeprefix("phase-"), await cg.kill())
                cg.remove()
        prefix = f"{MARKER_NAME}={self.instance}.".encode()
        for pid in procfs.marked(prefix):
            value = procfs.marker_value(pid, prefix) or ""
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                add(value, 1)
        return ended

    def close(self) -> None:
        """Removes this instance's (empty) directories at shutdown."""
        for version, base in self._instance_dirs():
            Role(version, base).prune()


def subreaper_scope(limits: ResourceLimits | None = None) -> PhaseScope:
    """A scope without a cgroup, for a supervisor used on its own (tests, tools)."""
    containment = Containment(ContainmentMode.SUBREAPER, "srv-adhoc", "a child-subreaper shim per phase")
    return containment.scope(uuid.uuid4().hex, limits)


# -- detection -----------------------------------------------------------------------------


def _instance_dir(h: Hierarchy, cgroup_parent: str, instance: str) -> Path | None:
    if cgroup_parent.startswith("/"):
        return h.to_dir(cgroup_parent.rstrip("/") + "/" + instance)
    own = h.own_dir
    return own / cgroup_parent / instance if own is not None else None


def _prepare(h: Hierarchy, cgroup_parent: str, instance: str) -> Path:
    d = _instance_dir(h, cgroup_parent, instance)
    if d is None:
        raise ContainmentError(f"the server's cgroup {h.own} is not visible under {h.mount}")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ContainmentError(f"cannot create {d}: {exc.strerror or exc}") from None
    return d


def _probe(cgroup: PhaseCgroup | None) -> None:
    """Starts a trivial command through the shim exactly as a phase would (joining the cgroup)."""
    try:
        if cgroup is not None:
            cgroup.create()
    except CgroupError as exc:
        raise ContainmentError(str(exc)) from None
    try:
        cmd = shim_command([sys.executable, "-S", "-c", ""], joins=cgroup.procs_files if cgroup else ())
        done = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=30,
            start_new_session=True,
            check=False,
        )
        if done.returncode != 0:
            raise ContainmentError(
                f"the phase shim failed its probe (exit {done.returncode}): "
                f"{done.stderr.decode(errors='replace').strip()[:300]}"
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ContainmentError(f"the phase shim failed its probe: {exc}") from None
    finally:
        if cgroup is not None:
            cgroup.remove()


def _v1_role(
    v1: dict[str, Hierarchy], controller: str, cgroup_parent: str, instance: str, notes: list[str]
) -> Role | None:
    h = v1.get(controller)
    if h is None:
        return None
    try:
        return Role(1, _prepare(h, cgroup_parent, instance))
    except ContainmentError as exc:
        notes.append(f"no {controller} limits: {exc}")
        return None


def _cgroup_containment(
    mode: ContainmentMode, hierarchies: list[Hierarchy], cgroup_parent: str, instance: str
) -> Containment:
    v2 = next((h for h in hierarchies if h.version == 2), None)
    v1 = {c: h for h in hierarchies if h.version == 1 for c in h.controllers}
    notes: list[str] = []
    memory = cpu = pids = None
    if mode is ContainmentMode.CGROUP_V2:
        if v2 is None:
            raise ContainmentError("no cgroup2 hierarchy is mounted")
        base = _prepare(v2, cgroup_parent, instance)
        if not (base / "cgroup.freeze").exists():
            raise ContainmentError(f"{base} has no cgroup.freeze (kernel older than 5.2)")
        own = v2.own_dir
        enabled = tuple(sorted(enable_controllers(own, base, ("memory", "cpu", "pids")))) if own else ()
        core = Role(2, base, enabled, own)
        memory = core if "memory" in enabled else _v1_role(v1, "memory", cgroup_parent, instance, notes)
        cpu = core if "cpu" in enabled else _v1_role(v1, "cpu", cgroup_parent, instance, notes)
        pids = core if "pids" in enabled else _v1_role(v1, "pids", cgroup_parent, instance, notes)
    else:
        if "freezer" not in v1:
            raise ContainmentError("no cgroup v1 freezer hierarchy is mounted")
        core = Role(1, _prepare(v1["freezer"], cgroup_parent, instance))
        if not (core.base / "freezer.state").exists():
            raise ContainmentError(f"{core.base} has no freezer.state")
        memory = _v1_role(v1, "memory", cgroup_parent, instance, notes)
        cpu = _v1_role(v1, "cpu", cgroup_parent, instance, notes)
        pids = _v1_role(v1, "pids", cgroup_parent, instance, notes)
    _probe(PhaseCgroup(core, f"probe-{os.getpid()}", memory, cpu, pids=pids))

    def where(role: Role | None) -> str:
        return f"v{role.version} {role.base}" if role else "not available"

    detail = (
        f"kill/freeze: cgroup v{core.version} {core.base}; memory limits: {where(memory)}; "
        f"cpu limits: {where(cpu)}; process limits: {where(pids)}"
    )
    if notes:
        detail += "; " + "; ".join(notes)
    return Containment(
        mode,
        instance,
        detail,
        core=core,
        memory=memory,
        cpu=cpu,
        hierarchies=hierarchies,
        cgroup_parent=cgroup_parent,
        pids=pids,
    )


def detect(setting: str, cgroup_parent: str, instance: str, *, proc: str = "/proc") -> Containment:
    """The containment this server uses, by ``setting``; ContainmentError if a forced one is unavailable.

    ``auto`` takes a cgroup v2 (pure or the ``unified`` mount of a hybrid host), then the v1
    freezer, then the subreaper shim; ``cgroup`` takes either cgroup; the others force one.
    """
    if setting not in SETTINGS:
        raise ContainmentError(f"containment {setting!r} is not one of {', '.join(SETTINGS)}")
    hierarchies = discover(proc)
    reasons: list[str] = []
    candidates = {
        "auto": (ContainmentMode.CGROUP_V2, ContainmentMode.CGROUP_V1),
        "cgroup": (ContainmentMode.CGROUP_V2, ContainmentMode.CGROUP_V1),
        "cgroup-v2": (ContainmentMode.CGROUP_V2,),
        "cgroup-v1": (ContainmentMode.CGROUP_V1,),
        "subreaper": (),
    }[setting]
    for mode in candidates:
        try:
            return _cgroup_containment(mode, hierarchies, cgroup_parent, instance)
        except ContainmentError as exc:
            reasons.append(f"{MODE_NAMES[mode]}: {exc}")
            for h in hierarchies:  # what this attempt made, if empty
                d = _instance_dir(h, cgroup_parent, instance)
                if d is not None:
                    Role(h.version, d).prune()
    if setting.startswith("cgroup"):
        raise ContainmentError("no usable cgroup for phase containment (" + "; ".join(reasons) + ")")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            raise ContainmentError(f"prctl(PR_GET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")
    except OSError as exc:
        raise ContainmentError(f"cannot use prctl: {exc}") from None
    _probe(None)
    detail = "a child-subreaper shim per phase; no cgroup" + (
        f" ({'; '.join(reasons)})" if reasons else " (forced by configuration)"
    )
    return Containment(
        ContainmentMode.SUBREAPER, instance, detail, hierarchies=hierarchies, cgroup_parent=cgroup_parent
    )

"""cgroup v1 / v2 as the server finds them, and the operations on one phase's cgroup.

Discovery reads ``/proc/self/mountinfo`` and ``/proc/self/cgroup``: which hierarchies are mounted
(pure v2, hybrid = v1 controllers plus a v2 ``unified`` mount, v1 only), with which controllers,
and where the server's own cgroup is in each. Phase cgroups are made below the server's own
cgroup (or an absolute path in the hierarchy), so whatever limits the server runs under also
bound its phases.

A phase cgroup has up to three roles, each in the hierarchy that can fill it:

- core (enumerate, freeze, kill): v2 (``cgroup.procs``, ``cgroup.freeze``, ``cgroup.kill``) or
  the v1 freezer (``freezer.state``; killing is freeze, SIGKILL every member, thaw, until empty);
- memory: v2 ``memory.max`` (with ``memory.oom.group``) or v1 ``memory.limit_in_bytes``;
- cpu: v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``;
- pids: ``pids.max`` (the same file in v2 and v1): a fork beyond it fails with EAGAIN, and
  ``pids.events`` counts the refusals, which is how the server learns a phase hit it.

On a hybrid host the core is the v2 ``unified`` mount (its core files need no controller) and
the limits come from the v1 hierarchies.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from helix_runner.process import procfs

CPU_PERIOD_US = 100_000
_POLL_S = 0.005


class CgroupError(Exception):
    """A cgroup operation failed; the message is one line for a person."""


@dataclass(frozen=True)
class Hierarchy:
    """One mounted cgroup hierarchy and the server's own cgroup in it."""

    version: int  # 1 or 2
    mount: Path
    root: str  # the mount's root inside the hierarchy (mountinfo field 4)
    controllers: frozenset[str]  # v1: the controllers bound to it; v2: empty (see cgroup.controllers)
    own: str  # the server's cgroup in this hierarchy (/proc/self/cgroup)

    def to_dir(self, cgroup: str) -> Path | None:
        """The directory of a cgroup path of this hierarchy, or None when the mount does not show it."""
        root = self.root.rstrip("/")
        if cgroup != self.root and not cgroup.startswith(root + "/"):
            return None
        rel = cgroup[len(root) :].strip("/")
        return self.mount / rel if rel else self.mount

    @property
    def own_dir(self) -> Path | None:
        return self.to_dir(self.own)


def _unescape(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit() and i + 4 <= len(text):
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def discover(proc: str = "/proc") -> list[Hierarchy]:
    """The cgroup hierarchies mounted in this mount namespace that hold the server's process."""
    try:
        own_lines = Path(proc, "self", "cgroup").read_text().splitlines()
        mount_lines = Path(proc, "self", "mountinfo").read_text().splitlines()
    except OSError:
        return []
    own_v2: str | None = None
    own_v1: list[tuple[frozenset[str], str]] = []
    for line in own_lines:
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hid == "0" and not ctrls:
            own_v2 = path
        elif ctrls:
            own_v1.append((frozenset(ctrls.split(",")), path))
    found: list[Hierarchy] = []
    seen: set[object] = set()
    for line in mount_lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf, rf = left.split(), right.split()
        if len(lf) < 5 or len(rf) < 3:
            continue
        fstype, root, mount = rf[0], _unescape(lf[3]), Path(_unescape(lf[4]))
        if fstype == "cgroup2" and own_v2 is not None and 2 not in seen:
            seen.add(2)
            found.append(Hierarchy(2, mount, root, frozenset(), own_v2))
        elif fstype == "cgroup":
            options = set(rf[2].split(","))
            for ctrls, path in own_v1:
                if ctrls <= options and ctrls not in seen:
                    seen.add(ctrls)
                    found.append(Hierarchy(1, mount, root, ctrls, path))
                    break
    return found


def _read(path: Path) -> str:
    with open(path) as f:
        return f.read()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _keyed(path: Path) -> dict[str, int]:
    """A flat keyed file (``memory.events``, ``cgroup.events``, ``memory.oom_control``)."""
    out = {}
    with contextlib.suppress(OSError):
        for line in _read(path).splitlines():
            key, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                out[key] = int(value)
    return out


def _int_file(path: Path) -> int | None:
    try:
        return int(_read(path).strip())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Role:
    """A hierarchy filling one role, and the directory phase cgroups of this server go under.

    ``base`` exists only while phases run (an idle or killed server leaves no empty cgroups
    behind); on v2, making it again enables ``controllers`` on the way down from ``own``.
    """

    version: int
    base: Path
    controllers: tuple[str, ...] = ()
    own: Path | None = None

    def ensure(self) -> None:
        """Makes ``base`` (and its parents) if a phase cgroup needs it."""
        if self.base.is_dir():
            return
        for _ in range(3):  # another server may remove a shared parent meanwhile
            try:
                self.base.mkdir(parents=True, exist_ok=True)
                break
            except FileNotFoundError:
                continue
        if self.version == 2 and self.controllers and self.own is not None:
            enable_controllers(self.own, self.base, self.controllers)

    def prune(self) -> None:
        """Removes ``base`` if it is empty (its parent, ``cgroup_parent``, stays: it may be shared or
        set up by an operator)."""
        with contextlib.suppress(OSError):
            self.base.rmdir()


@dataclass(frozen=True)
class ResourceLimits:
    """Per-phase limits (None: unlimited)."""

    memory_bytes: int | None = None
    cpu_millicores: int | None = None
    pids: int | None = None  # processes and threads at once
    # The largest file any process of the phase may write (RLIMIT_FSIZE, set by the phase shim; no
    # cgroup involved): the phase's workspace cap.
    file_bytes: int | None = None

    def describe(self) -> str:
        parts = []
        if self.memory_bytes:
            parts.append(f"memory {self.memory_bytes // (1024 * 1024)} MiB")
        if self.cpu_millicores:
            parts.append(f"cpu {self.cpu_millicores / 1000:g} cores")
        if self.pids:
            parts.append(f"{self.pids} processes")
        if self.file_bytes:
            parts.append(f"files up to {self.file_bytes // (1024 * 1024)} MiB")
        return ", ".join(parts) or "no limits"


@dataclass
class PhaseCgroup:
    """One phase's cgroup: a directory per distinct hierarchy it uses (core, memory, cpu)."""

    core: Role
    name: str
    memory: Role | None = None
    cpu: Role | None = None
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    pids: Role | None = None

    @property
    def core_dir(self) -> Path:
        return self.core.base / self.name

    @property
    def memory_dir(self) -> Path | None:
        return self.memory.base / self.name if self.memory else None

    @property
    def cpu_dir(self) -> Path | None:
        return self.cpu.base / self.name if self.cpu else None

    @property
    def pids_dir(self) -> Path | None:
        return self.pids.base / self.name if self.pids else None

    @property
    def dirs(self) -> list[Path]:
        """Every directory of the cgroup, the core first, each once."""
        out: list[Path] = []
        for d in (self.core_dir, self.memory_dir, self.cpu_dir, self.pids_dir):
            if d is not None and d not in out:
                out.append(d)
        return out

    @property
    def procs_files(self) -> list[Path]:
        """The files a process writes its pid to, to join every part of the cgroup."""
        return [d / "cgroup.procs" for d in self.dirs]

    # -- life cycle ------------------------------------------------------------------------

    def create(self) -> None:
        """Makes the directories and applies the limits; CgroupError (and nothing left behind) if it cannot."""
        made: list[Path] = []
        try:
            for attempt in range(3):
                for role in (self.core, self.memory, self.cpu, self.pids):
                    if role is not None:
                        role.ensure()
                try:
                    for d in self.dirs:
                        if d not in made:
                            d.mkdir()
                            made.append(d)
                    break
                except FileNotFoundError:
                    # Another phase of this server ended meanwhile and pruned the then-empty
                    # ``base`` (Role.prune); make it again, unless that keeps happening.
                    if attempt == 2:
                        raise
            self._apply_limits()
        except OSError as exc:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise CgroupError(
                f"cannot create the phase cgroup {self.core_dir}: {exc.strerror or exc}"
            ) from None

    def _apply_limits(self) -> None:
        lim = self.limits
        if lim.memory_bytes:
            mem = self.memory_dir
            if mem is None or self.memory is None:
                raise OSError(errno.ENOTSUP, "no memory controller")
            if self.memory.version == 2:
                _write(mem / "memory.max", str(lim.memory_bytes))
                # Swap would let the phase exceed its limit slowly instead of failing fast.
                if (mem / "memory.swap.max").exists():
                    _write(mem / "memory.swap.max", "0")
                # One OOM kill ends the whole phase, not just the largest process.
                if (mem / "memory.oom.group").exists():
                    _write(mem / "memory.oom.group", "1")
            else:
                _write(mem / "memory.limit_in_bytes", str(lim.memory_bytes))
                if (mem / "memory.memsw.limit_in_bytes").exists():
                    _write(mem / "memory.memsw.limit_in_bytes", str(lim.memory_bytes))
        if lim.cpu_millicores:
            cpu = self.cpu_dir
            if cpu is None or self.cpu is None:
                raise OSError(errno.ENOTSUP, "no cpu controller")
            quota = max(1000, lim.cpu_millicores * CPU_PERIOD_US // 1000)
            if self.cpu.version == 2:
                _write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(cpu / "cpu.cfs_quota_us", str(quota))
        if lim.pids:
            pids = self.pids_dir
            if pids is None:
                raise OSError(errno.ENOTSUP, "no pids controller")
            _write(pids / "pids.max", str(lim.pids))

    def remove(self, limit_s: float = 2.0) -> bool:
        """Removes the (empty) directories; a cgroup stays busy for a moment after its last exit."""
        deadline = time.monotonic() + limit_s
        left = [d for d in self.dirs if d.exists()]
        while left:
            for d in list(left):
                try:
                    d.rmdir()
                    left.remove(d)
                except FileNotFoundError:
                    left.remove(d)
                except OSError:
                    pass
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if not left:
            for role in (self.core, self.memory, self.cpu, self.pids):
                if role is not None:
                    role.prune()
        return not left

    # -- members ---------------------------------------------------------------------------

    def members(self) -> list[int]:
        """The processes in the cgroup now (empty when it is gone)."""
        try:
            return [int(p) for p in _read(self.core_dir / "cgroup.procs").split()]
        except (OSError, ValueError):
            return []

    def live_members(self) -> list[int]:
        return [p for p in self.members() if procfs.process_state(p) not in (None, "Z")]

    # -- freezer ---------------------------------------------------------------------------

    async def _set_frozen(self, frozen: bool, limit_s: float = 2.0) -> bool:
        d = self.core_dir
        if self.core.version == 2:
            _write(d / "cgroup.freeze", "1" if frozen else "0")

            def done() -> bool:
                return _keyed(d / "cgroup.events").get("frozen") == int(frozen)
        else:
            if not (d / "freezer.state").exists():
                return False  # a v1 hierarchy without the freezer: signals go out unfrozen
            _write(d / "freezer.state", "FROZEN" if frozen else "THAWED")

            def done() -> bool:
                return _read(d / "freezer.state").strip() == ("FROZEN" if frozen else "THAWED")

        deadline = time.monotonic() + limit_s
        while not done():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True

    async def signal_all(self, sig: signal.Signals, exclude: frozenset[int] = frozenset()) -> list[int]:
        """Sends ``sig`` to every member at one instant: the cgroup is frozen meanwhile, so no
        process can fork one that would be missed. Returns the pids signalled."""
        try:
            await self._set_frozen(True)
            sent = []
            for pid in self.members():
                if pid not in exclude:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                        sent.append(pid)
            return sent
        except OSError as exc:
            raise CgroupError(
                f"cannot signal the processes of {self.core_dir}: {exc.strerror or exc}"
            ) from None
        finally:
            with contextlib.suppress(OSError):
                await self._set_frozen(False)

    async def kill(self, limit_s: float = 10.0) -> int:
        """SIGKILLs every member until the cgroup is empty; returns how many processes were killed."""
        killed: set[int] = set(self.live_members())
        deadline = time.monotonic() + limit_s
        kill_file = self.core_dir / "cgroup.kill"
        while self.live_members() and time.monotonic() < deadline:
            if self.core.version == 2 and kill_file.exists():
                with contextlib.suppress(OSError):
                    _write(kill_file, "1")
            else:
                # v1 (or v2 before cgroup.kill): frozen, the signal waits for the thaw and nobody forks meanwhile.
                with contextlib.suppress(CgroupError):
                    killed.update(await self.signal_all(signal.SIGKILL))
            for _ in range(20):
                if not self.live_members():
                    break
                await asyncio.sleep(_POLL_S)
        # Zombies stay members until their parent (the shim, or init) reaps them, a moment later.
        while self.members() and time.monotonic() < deadline:  # noqa: ASYNC110 - the kernel offers no event here
            await asyncio.sleep(_POLL_S)
        return len(killed)

    # -- accounting ------------------------------------------------------------------------

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer killed in this cgroup (at its memory limit)."""
        mem = self.memory_dir
        if mem is None or self.memory is None:
            return 0
        if self.memory.version == 2:
            return _keyed(mem / "memory.events").get("oom_kill", 0)
        return _keyed(mem / "memory.oom_control").get("oom_kill", 0)

    def pids_refused(self) -> int:
        """Forks the kernel refused in this cgroup because it was at ``pids.max``."""
        pids = self.pids_dir
        return _keyed(pids / "pids.events").get("max", 0) if pids is not None and self.limits.pids else 0

    def memory_current(self) -> int | None:
        mem = self.memory_dir
        if mem is None or self.memory is None:
            return None
        return _int_file(mem / ("memory.current" if self.memory.version == 2 else "memory.usage_in_bytes"))

    def memory_peak(self) -> int | None:
        mem = self.memory_dir
        if mem is None or self.memory is None:
            return None
        return _int_file(mem / ("memory.peak" if self.memory.version == 2 else "memory.max_usage_in_bytes"))


def enable_controllers(own_dir: Path, target: Path, wanted: tuple[str, ...]) -> set[str]:
    """Enables ``wanted`` v2 controllers on the way from ``own_dir`` down to ``target``'s children.

    Each ``cgroup.subtree_control`` from the server's own cgroup (or, for a ``target`` outside
    it, from ``target``'s parent) to ``target`` gets ``+name``; a
    cgroup with processes of its own cannot delegate (EBUSY, the "no internal processes" rule),
    so on a host where the server shares its cgroup this may enable nothing. Returns the
    controllers phase cgroups under ``target`` will have.
    """
    if target.is_relative_to(own_dir):
        chain = [own_dir]
        for part in target.relative_to(own_dir).parts:
            chain.append(chain[-1] / part)
    else:  # an absolute cgroup_parent elsewhere: its own delegation is the operator's
        chain = [target.parent, target]
    for name in wanted:
        for d in chain:
            try:
                if name in _read(d / "cgroup.subtree_control").split():
                    continue
                _write(d / "cgroup.subtree_control", f"+{name}")
            except OSError:
                break
    try:
        return set(_read(target / "cgroup.subtree_control").split()) & set(wanted)
    except OSError:
        return set()

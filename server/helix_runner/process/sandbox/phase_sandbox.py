"""The server's sandbox: the layers chosen at start, and each phase's sandbox made from them.

``Sandbox.start`` detects what the host allows (``detect.py``), compiles the seccomp filters,
runs one probe through the shim as a phase would (giving up any layer that fails it), and logs
one line. ``Sandbox.prepare`` makes a phase's private home (``private_home.py``), its policy
(``policy.py``) and the shim's ``--sandbox`` argument; ``required`` refuses phases while a layer
is missing (``refusal``). See README "Sandbox" for what each layer blocks.
"""

from __future__ import annotations

import logging
import marshal
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from helix_runner.domain.phase_result import SandboxLayer, SandboxReport
from helix_runner.errors import ErrorKind, RunnerError

# The shim imports these by path with -B: imported here too, so their bytecode is cached (the
# shim would otherwise compile them at every phase's start, a few ms).
from helix_runner.process.sandbox import capabilities, landlock, launch, relay, seccomp_load  # noqa: F401
from helix_runner.process.sandbox.bwrap import bwrap_argv
from helix_runner.process.sandbox.detect import (
    LAYERS,
    SandboxBroken,
    SandboxSupport,
    detect,
    says_unavailable,
)
from helix_runner.process.sandbox.policy import (
    LANDLOCK_DEVICES,
    SYSTEM_PATHS,
    SYSTEM_SECRETS,
    SandboxPolicy,
    inside,
    landlock_rules,
    make_policy,
    reachable,
    reaches,
)
from helix_runner.process.sandbox.private_home import PrivateHome, SessionStore
from helix_runner.process.sandbox.repo_guard import Protection, RepoGuard, layout, protection

log = logging.getLogger(__name__)

SETTINGS = ("auto", "required", "off")
SHIM_DIR = Path(__file__).resolve().parent.parent  # process/: the shim's own directory


@dataclass(frozen=True)
class Layers:
    """What phases get: which layers are on (after the start-up probe), and why the others are not."""

    bwrap: str | None = None
    netns: bool = False
    landlock_abi: int = 0
    seccomp: bool = False
    tcp_rules: bool = False  # Landlock TCP connect rules are the network boundary (no network namespace)
    notes: dict[str, str] = field(default_factory=dict)
    sized_tmpfs: bool = False  # bubblewrap can size a tmpfs (``--size``)


@dataclass
class PhaseSandbox:
    """One phase's sandbox: its private home, the shim's argument, its environment and its report."""

    home: PrivateHome
    spec: dict
    env: dict[str, str]
    report: SandboxReport
    project: str
    sessions: SessionStore | None = None
    closed: bool = False
    # What ``env`` replaced in the phase's composed environment (None: unset), so a warm start is
    # matched on the environment without the sandbox's per-run variables.
    replaced: dict[str, str | None] = field(default_factory=dict)
    # Rebuilds ``spec`` with the repositories' protected paths once the workspace exists (a git
    # worktree is made after the sandbox is prepared); None: nothing to protect, or protected already.
    rebuild: Callable[[], tuple[dict, Protection]] | None = None
    protection: Protection = field(default_factory=Protection)
    guard: RepoGuard | None = None
    transcripts_max_bytes: int = 0  # a session larger is not kept for resume (phase_output_max_bytes)

    def arm(self) -> None:
        """Just before the phase's first process starts: the spec with the protected paths of
        repositories made meanwhile, and the guard's snapshot of what the phase may not change."""
        if self.rebuild is not None:
            self.spec, self.protection = self.rebuild()
            self.rebuild = None
            self._write_spec()
        if self.guard is None and self.protection.guarded:
            self.guard = RepoGuard(self.protection.guarded)
            self.report = replace(self.report, protected=tuple(self.protection.paths))

    def restore(self) -> tuple[list[str], list[str]]:
        """After the phase's processes are gone: puts back the protected paths it changed (where no
        bubblewrap kept them read-only); (put back, changed but not put back), also in the report."""
        if self.guard is None:
            return [], []
        restored, failed = self.guard.restore()
        self.guard = None
        if restored or failed:
            self.report = replace(self.report, restored=(*self.report.restored, *restored, *failed))
            log.warning("a phase changed protected repository paths", extra={"fields": {
                "restored": restored, "not_restored": failed, "home": str(self.home.home)}})
        return restored, failed

    def _write_spec(self) -> None:
        """The spec where the shim reads it (marshal: no import; sandbox/launch.py)."""
        tmp = self.spec_path.with_suffix(".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(marshal.dumps(self.spec))
        os.replace(tmp, self.spec_path)

    def apply(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with this sandbox's variables, remembering what they replaced."""
        self.replaced = {k: env.get(k) for k in self.env}
        return {**env, **self.env}

    def unapply(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` as it was before ``apply``."""
        out = dict(env)
        for k, v in self.replaced.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    @property
    def spec_path(self) -> Path:
        """Where the shim reads ``spec`` from (beside the home, out of the phase's sight)."""
        return self.home.root / "sandbox.spec"

    def shim_args(self) -> list[str]:
        return ["--sandbox", str(self.spec_path)] if self.spec else []

    def close(self) -> list[str]:
        """The phase has ended: keeps its transcripts for resume, removes its home; returns the
        session ids kept."""
        if self.closed:
            return []
        self.closed = True
        kept: list[str] = []
        try:
            if self.sessions is not None:
                kept = self.sessions.save(self.project, self.home, self.transcripts_max_bytes)
        except OSError:
            log.warning("could not keep a phase's session transcripts", exc_info=True,
                        extra={"fields": {"home": str(self.home.home)}})
        self.home.remove()
        return kept


class Sandbox:
    """The server's sandbox setting and layers; ``prepare`` one ``PhaseSandbox`` per phase run."""

    def __init__(self, setting: str, layers: Layers, *, data_dir: Path, template: Path | None = None,
                 read_paths: Sequence[Path] = (), hidden: Sequence[Path] = (),
                 egress_ports: tuple[int, ...] | None = (), egress_note: str = "",
                 seccomp_dir: Path | None = None, private_home: bool = True,
                 required_layers: Iterable[str] = LAYERS, tmp_max_bytes: int = 0, transcripts_max_bytes: int = 0):
        self.setting = setting
        self.required_layers = frozenset(required_layers)
        self.tmp_max_bytes = tmp_max_bytes
        self.transcripts_max_bytes = transcripts_max_bytes
        self.layers = layers
        self.data_dir = data_dir
        self.template = template
        self.read_paths = tuple(str(p) for p in read_paths)
        # Each hidden path also by its real path: a policy compares paths as strings, and a data
        # dir reached through a symbolic link must stay hidden where its target is allowed.
        self.hidden = tuple(dict.fromkeys(q for p in hidden for q in (str(p), os.path.realpath(p))))
        self.data_dirs = tuple(dict.fromkeys((str(data_dir), os.path.realpath(data_dir))))
        self.egress_ports = egress_ports
        self.egress_note = egress_note
        self.seccomp_dir = seccomp_dir
        self.private_home = private_home
        # The system's secret files this server's user could read (the others need no hiding).
        self.system_secrets = tuple(p for p in SYSTEM_SECRETS if reachable(p))
        self.homes = data_dir / "sandbox" / "homes"
        self.sessions = SessionStore(data_dir / "sandbox" / "sessions")

    @property
    def on(self) -> bool:
        return self.setting != "off"

    # -- start -------------------------------------------------------------------------------

    @classmethod
    def start(cls, setting: str, *, data_dir: Path, skip: Iterable[str] = (), bwrap_path: str | None = None,
              egress_ports: tuple[int, ...] | None = (), egress_note: str = "", **kwargs) -> Sandbox:
        """Detects, compiles, probes and logs; ``egress_ports`` None: the phases must reach the
        internet directly (no gateway), so no network layer can confine them (``egress_note`` says why)."""
        if setting == "off":
            sandbox = cls(setting, Layers(notes=dict.fromkeys(LAYERS, "the sandbox is off (sandbox = off)")),
                          data_dir=data_dir, egress_ports=egress_ports, egress_note=egress_note, **kwargs)
            log.warning("sandbox", extra={"fields": {"setting": "off", "layers": "none: every phase runs with "
                                                     "the server's view of files, processes and network"}})
            return sandbox
        support = detect(frozenset(skip), bwrap_path)
        seccomp_dir = None
        if support.seccomp:
            from helix_runner.process.sandbox.seccomp_filter import write_filters

            seccomp_dir = data_dir / "sandbox" / "seccomp"
            write_filters(seccomp_dir)
        layers = _initial_layers(support, egress_ports, egress_note)
        sandbox = cls(setting, layers, data_dir=data_dir, egress_ports=egress_ports, egress_note=egress_note,
                      seccomp_dir=seccomp_dir, **kwargs)
        sandbox.layers = sandbox._probe()
        reported = sandbox.report_layers()
        log.info("sandbox", extra={"fields": {"setting": setting, **{
            layer.name: (layer.detail if layer.active else f"OFF: {layer.detail}") for layer in reported}}})
        if setting == "auto" and not any(layer.active for layer in reported):
            why = "; ".join(f"{layer.name}: {layer.detail}" for layer in reported)
            raise SandboxBroken(f"no sandbox layer is available ({why}); phases would run with the server's view "
                                "of every file, process and port: set sandbox = off to run them that way")
        return sandbox

    def _probe(self) -> Layers:
        """Runs ``true`` through the shim in the sandbox a phase would get; while it fails because the
        kernel refuses a call (EPERM, EACCES, ENOSYS: a container that allows less than detection
        saw), gives up a layer (bubblewrap, then the network namespace, then Landlock, then seccomp)
        until one works. SandboxBroken for any other failure: a layer is never given up for the
        server's own error (a missing filter file once turned every layer off)."""
        layers = self.layers
        for drop in ("namespaces", "network", "landlock", "seccomp", None):
            failure = self._probe_once(layers)
            if failure is None:
                return layers
            if not says_unavailable(failure):
                raise SandboxBroken(f"the sandbox's start-up probe failed: {failure}")
            log.warning(f"sandbox probe failed: {failure}", extra={"fields": {"error": failure, "giving_up": drop}})
            if drop is None:
                break
            layers = _without(layers, drop, f"failed the start-up probe: {failure}")
        return _without(_without(_without(_without(layers, "namespaces", "probe failed"), "network", "probe failed"),
                                 "landlock", "probe failed"), "seccomp", "probe failed")

    def _probe_once(self, layers: Layers) -> str | None:
        saved, self.layers = self.layers, layers
        probe_root = Path(tempfile.mkdtemp(prefix="helix-sandbox-probe-"))
        try:
            phase = self.prepare("probe", cwd=str(probe_root), project="", root=probe_root / "run")
            cmd = [sys.executable, "-E", "-s", "-S", "-B", str(SHIM_DIR / "phase_shim.py"), "--status-fd", "1",
                   *phase.shim_args(),
                   "--", "/bin/sh", "-c", "exit 0"]
            done = subprocess.run(cmd, cwd=probe_root, env={**phase.env, "PATH": "/usr/bin:/bin"},
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False,
                                  start_new_session=True)
            if done.returncode != 0:  # the shim's "error ..." status line, and what bubblewrap said
                said = [line.removeprefix("error ") for line in done.stdout.decode(errors="replace").splitlines()
                        if line.startswith("error ")]
                stderr = done.stderr.decode(errors="replace").strip().splitlines()
                return ": ".join(part for part in (" ".join(said), stderr[-1] if stderr else "") if part)[-300:] \
                    or f"exit {done.returncode}"
            return None
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            self.layers = saved
            import shutil

            shutil.rmtree(probe_root, ignore_errors=True)

    # -- reports and refusals ------------------------------------------------------------------

    def report_layers(self) -> tuple[SandboxLayer, ...]:
        lay = self.layers
        notes = lay.notes
        out = []
        if lay.bwrap:
            out.append(SandboxLayer("namespaces", True, f"bubblewrap ({lay.bwrap}): mount namespace of allowed "
                                    "paths only, private /tmp, PID namespace with its own /proc, IPC, UTS and "
                                    "cgroup namespaces, no capabilities"))
        else:
            out.append(SandboxLayer("namespaces", False, notes.get("namespaces", "unavailable")))
        if lay.netns:
            out.append(SandboxLayer("network", True, "private network namespace: its own loopback only; the "
                                    f"host's 127.0.0.1 ports {_ports(self.egress_ports)} relayed in"))
        elif lay.tcp_rules:
            out.append(SandboxLayer("network", True, f"Landlock TCP connect to the host's ports "
                                    f"{_ports(self.egress_ports)} only; seccomp refuses UDP, raw and packet "
                                    "sockets (the phase's own loopback servers are unreachable too)"))
        else:
            out.append(SandboxLayer("network", False, notes.get("network", "unavailable")))
        if lay.landlock_abi:
            what = "signals and abstract unix sockets scoped to the phase, no ptrace of other processes" + (
                "" if lay.bwrap else "; file access only to the allowed paths and device nodes")
            out.append(SandboxLayer("landlock", True, f"ABI {lay.landlock_abi}: {what}"))
        else:
            out.append(SandboxLayer("landlock", False, notes.get("landlock", "unavailable")))
        if lay.seccomp:
            out.append(SandboxLayer("seccomp", True, "deny list: io_uring, bpf, perf_event_open, userfaultfd, "
                                    "keyrings, kexec, modules, mount API, setns, new user namespaces" + (
                                        "" if lay.landlock_abi else ", ptrace") + (
                                        ", non-TCP sockets" if lay.tcp_rules else "") + (
                                        "" if lay.bwrap else ", SysV IPC and message queues")))
        else:
            out.append(SandboxLayer("seccomp", False, notes.get("seccomp", "unavailable")))
        return tuple(out)

    def report(self) -> SandboxReport:
        """The server's sandbox: the setting, each layer, the ports phases may reach (no home)."""
        return SandboxReport(setting=self.setting, layers=self.report_layers(), egress_ports=self.egress_ports or ())

    def refusal(self) -> RunnerError | None:
        """Under ``required``: FAILED_PRECONDITION naming every missing layer and why it is missing
        (metadata: ``layer`` the first, ``layers`` all, ``detail`` the first's reason and
        ``<layer>_detail`` each one's)."""
        if self.setting != "required":
            return None
        missing = [layer for layer in self.report_layers() if not layer.active and layer.name in self.required_layers]
        if not missing:
            return None
        names = [layer.name for layer in missing]
        which = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        why = "; ".join(f"{layer.name}: {layer.detail}" for layer in missing)
        plural = "layers are" if len(names) > 1 else "layer is"
        return RunnerError(ErrorKind.FAILED_PRECONDITION, "SANDBOX_UNAVAILABLE",
                           f"the sandbox is required but its {which} {plural} unavailable on this server: {why}",
                           {"layer": names[0], "layers": ",".join(names), "detail": missing[0].detail,
                            **{f"{layer.name}_detail": layer.detail for layer in missing}})

    # -- phases --------------------------------------------------------------------------------

    def prepare(self, run_id: str, *, cwd: str, project: str, read_write: Sequence[str] = (),
                read_only: Sequence[str] = (), covered: Sequence[str] = (), private_read_only: Sequence[str] = (),
                root: Path | None = None, repos: Sequence[Path] = (), worktree: Path | None = None,
                worktree_of: Path | None = None, protect: bool = True, nproc: int | None = None) -> PhaseSandbox:
        """A fresh private home and the sandbox of one phase run (the caller closes it).

        ``repos``: the tops of the git working trees the phase works in, whose git config, hooks
        and attributes it may not change (``repo_guard.py``; ``protect`` False: it may);
        ``worktree``: a git worktree of the repository at ``worktree_of`` made for the phase after
        this (its protection comes with ``PhaseSandbox.arm``). ``nproc``: a process limit the sandbox enforces itself (RLIMIT_NPROC
        in its user namespace) where no pids cgroup does. RunnerError when the rules cannot give the
        phase its own working directory."""
        home = PrivateHome(root or self.homes / run_id)
        home.create(self.template)
        lay = self.layers
        if not self.on:  # a private home only (offline mode with the sandbox off)
            report = SandboxReport(setting=self.setting, layers=self.report_layers(), home=str(home.home))
            return PhaseSandbox(home, {}, home.env(str(home.tmp)), report, project, self.sessions,
                                transcripts_max_bytes=self.transcripts_max_bytes)
        try:
            base = {"cwd": cwd, "read_only": [*SYSTEM_PATHS, *self.read_paths, *read_only],
                    "read_write": [cwd, *read_write], "hidden": [*self.system_secrets, *self.hidden, *self.data_dirs],
                    "home": str(home.home), "tmp": str(home.tmp), "covered": covered,
                    "egress_ports": self.egress_ports or (), "private_read_only": private_read_only}

            def build() -> tuple[dict, Protection]:
                found = [r for r in (layout(t) for t in repos) if r is not None] if protect else []
                if protect and worktree is not None and worktree_of is not None:
                    main = layout(worktree_of)  # the repository the server made the worktree of
                    linked = layout(worktree, common_dir=main.common_dir) if main is not None else None
                    found += [linked] if linked is not None else []
                # A working tree whose .git the server cannot trust: its own files still are guarded.
                guarded = protection(found, [Path(cwd), *repos]) if protect else Protection()
                splittable = [str(r.common_dir) for r in found if worktree is not None and r.common_dir != r.git_dir]
                policy = make_policy(**{**base, "read_write": [*base["read_write"], *guarded.writable]},
                                     protected=guarded.paths, splittable=splittable)
                return self._spec(policy, nproc), guarded

            spec, protected = build()
            env = home.env("/tmp" if lay.bwrap else str(home.tmp))
            report = SandboxReport(setting=self.setting, layers=self.report_layers(), home=str(home.home),
                                   egress_ports=tuple(spec["ports"]))
            phase = PhaseSandbox(home, spec, env, report, project, self.sessions, protection=protected,
                                 rebuild=build if worktree is not None and protect else None,
                                 transcripts_max_bytes=self.transcripts_max_bytes)
            phase._write_spec()
        except BaseException:
            home.remove()
            raise
        return phase

    def _spec(self, policy: SandboxPolicy, nproc: int | None) -> dict:
        """The shim's ``--sandbox`` spec of a policy (sandbox/launch.py reads it)."""
        lay = self.layers
        spec: dict = {"ports": list(policy.egress_ports), "netns": lay.netns, "landlock_abi": lay.landlock_abi}
        seccomp = lay.seccomp and self.seccomp_dir is not None
        if lay.bwrap:
            spec["bwrap"] = bwrap_argv(lay.bwrap, policy, seccomp_denies_userns=seccomp,
                                       tmp_bytes=self.tmp_max_bytes if lay.sized_tmpfs else 0)
        elif lay.landlock_abi:
            rules = landlock_rules(policy, landlock.READ, landlock.WRITE)
            if not reaches(rules, policy.cwd, landlock.READ | landlock.WRITE):
                blocking = [h for h in policy.hidden if inside(h, policy.cwd) and h not in policy.covered]
                raise RunnerError(
                    ErrorKind.FAILED_PRECONDITION, "SANDBOX_WORKDIR_UNREACHABLE",
                    f"the sandbox cannot give this phase its working directory {policy.cwd}: it holds "
                    f"{', '.join(blocking) or 'a hidden path'}, which Landlock (without bubblewrap) cannot hide "
                    "inside a directory it allows; run the phase in a directory that does not hold the server's "
                    "data dir or secret files, or move them out of the workspace roots",
                    {"working_dir": policy.cwd, "hidden": ",".join(blocking)})
            spec["fs"] = [*rules, *((device, landlock.DEVICE) for device in LANDLOCK_DEVICES),
                          ("/proc", landlock.READ), ("/sys", landlock.READ)]
            spec["tcp"] = lay.tcp_rules
        if nproc and (lay.bwrap or lay.netns):  # a user namespace of the phase's own counts only its tasks
            spec["nproc"] = int(nproc)
        if seccomp:
            from helix_runner.process.sandbox.seccomp_filter import variant_name

            # New user namespaces are refused by the filter in every mode (under bubblewrap in
            # place of its --disable-userns); ptrace where Landlock does not scope it; SysV and
            # POSIX message-queue IPC where no IPC namespace (bubblewrap's) keeps the host's apart.
            name = variant_name(userns=True, ptrace=not lay.landlock_abi, sockets=lay.tcp_rules, ipc=not lay.bwrap)
            spec["seccomp"] = str(self.seccomp_dir / f"{name}.bpf")
        return spec

    @property
    def enforces_nproc(self) -> bool:
        """Whether phases run in a user namespace of their own, where RLIMIT_NPROC is a per-phase
        process limit (without one it counts every process of the server's user)."""
        return self.on and bool(self.layers.bwrap or self.layers.netns)

    def restore_session(self, phase: PhaseSandbox, session_id: str, cwd: str) -> None:
        """Copies this project's transcript of ``session_id`` into the phase's home; RunnerError
        when the session belongs to another project or to none this server kept."""
        if self.sessions.restore(phase.project, session_id, phase.home, cwd):
            return
        owner = self.sessions.owner(session_id)
        if owner is not None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "SESSION_OF_OTHER_PROJECT",
                              f"options.resume_session_id: session {session_id} belongs to another project; a "
                              "phase may resume only its own project's sessions",
                              {"field": "options.resume_session_id", "session_id": session_id})
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "SESSION_NOT_FOUND",
                          f"options.resume_session_id: this server keeps no session {session_id} of the phase's "
                          "project (transcripts are kept per project on the server that ran them)",
                          {"field": "options.resume_session_id", "session_id": session_id})


def off_report() -> SandboxReport:
    """The report of a server that sandboxes nothing (``sandbox = off``, not offline)."""
    return SandboxReport(setting="off", layers=tuple(SandboxLayer(name, False, "the sandbox is off (sandbox = off)")
                                                     for name in LAYERS))


def runtime_paths(path_env: str, *, claude_path: str = "") -> list[str]:
    """Read-only directories the CLI and the tools on its PATH need beyond the system ones: the
    CLI's directory, this Python (the key helper runs it) and this package, and each PATH entry
    (with its real path; a version manager's ``shims`` directory brings its root, e.g. pyenv's)."""
    import helix_runner

    paths = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
             os.path.dirname(os.path.dirname(os.path.abspath(helix_runner.__file__)))]
    if claude_path:
        paths += [os.path.dirname(claude_path), os.path.dirname(os.path.realpath(claude_path))]
    for entry in path_env.split(os.pathsep):
        if not entry or not os.path.isabs(entry) or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        paths += [entry, real]
        if os.path.basename(real) == "shims":
            paths.append(os.path.dirname(real))
    return paths


def _ports(ports: tuple[int, ...] | None) -> str:
    return ", ".join(str(p) for p in ports) if ports else "(none)"


def _initial_layers(support: SandboxSupport, egress_ports: tuple[int, ...] | None, egress_note: str) -> Layers:
    notes = {layer: support.note(layer) for layer in LAYERS if support.note(layer)}
    confinable = egress_ports is not None
    netns = support.userns and confinable
    tcp_rules = not netns and confinable and support.landlock_abi >= 4 and support.seccomp
    if not confinable:
        notes["network"] = egress_note or "the phases must reach the model API directly"
    elif not netns and not tcp_rules:
        notes.setdefault("network", "no user namespaces, and no Landlock ABI 4+ with seccomp for TCP rules")
    return Layers(bwrap=support.bwrap, netns=netns, landlock_abi=support.landlock_abi, seccomp=support.seccomp,
                  tcp_rules=tcp_rules, notes=notes, sized_tmpfs=support.bwrap_sized_tmpfs)


def _without(layers: Layers, layer: str, why: str) -> Layers:
    notes = {**layers.notes, layer: why}
    if layer == "namespaces":
        return replace(layers, bwrap=None, notes=notes)
    if layer == "network":
        return replace(layers, netns=False, tcp_rules=False, notes=notes)
    if layer == "landlock":
        return replace(layers, landlock_abi=0, tcp_rules=False, notes=notes)
    return replace(layers, seccomp=False, tcp_rules=False, notes=notes)

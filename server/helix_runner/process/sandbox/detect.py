"""What the kernel and the container allow the sandbox, found once at server start.

Each layer is checked on its own (bubblewrap present, a new user + network namespace, the
Landlock ABI, seccomp filters and libseccomp), then ``phase_sandbox.Sandbox.start`` runs one
probe through the shim exactly as a phase would and gives up layers that fail it. A layer named
in ``skip`` (config ``sandbox_skip_layers``) is reported as off "by configuration", which is how
the tests force the degraded modes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from helix_runner.process.sandbox import landlock

LAYERS = ("namespaces", "network", "landlock", "seccomp")
_NETNS_PROBE = (
    "import sys; sys.path.insert(0, sys.argv[1]); from sandbox import netns; netns.enter([])"
)


@dataclass(frozen=True)
class SandboxSupport:
    """Per layer: available, or why not."""

    bwrap: str | None = None  # path of a working bubblewrap
    bwrap_version: str = ""
    userns: bool = False  # a new user + network namespace
    landlock_abi: int = 0
    seccomp: bool = False
    notes: tuple[tuple[str, str], ...] = ()  # (layer, why it is unavailable)

    def note(self, layer: str) -> str:
        return "; ".join(why for name, why in self.notes if name == layer)


def _run(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, (done.stderr or done.stdout).decode(errors="replace").strip()[:300]


def detect(skip: frozenset[str] = frozenset(), bwrap_path: str | None = None) -> SandboxSupport:
    """Checks each layer (``skip``: layers turned off by configuration)."""
    notes: list[tuple[str, str]] = []
    for layer in sorted(skip):
        notes.append((layer, "turned off by configuration (sandbox_skip_layers)"))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # process/, where the shim runs
    userns = False
    if "network" not in skip or "namespaces" not in skip:
        userns, why = _run([sys.executable, "-E", "-s", "-S", "-B", "-c", _NETNS_PROBE, here])
        if not userns:
            notes.append(("network", f"no new user and network namespace: {why.splitlines()[-1] if why else '?'}"))
    bwrap, version = None, ""
    if "namespaces" not in skip:
        found = bwrap_path or shutil.which("bwrap")
        if found is None:
            notes.append(("namespaces", "bubblewrap (bwrap) is not installed"))
        elif not userns:
            notes.append(("namespaces", "bubblewrap needs unprivileged user namespaces, which this host refuses"))
        else:
            ok, out = _run([found, "--version"])
            version = out.split()[-1] if ok and out else ""
            ok, why = _run([found, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                            "--disable-userns", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc",
                            "--dev", "/dev", "--", "true"])
            if ok:
                bwrap = found
            else:
                notes.append(("namespaces", f"bubblewrap cannot build a sandbox here: {why}"))
    abi = 0 if "landlock" in skip else landlock.abi()
    if not abi and "landlock" not in skip:
        notes.append(("landlock", "the kernel has no Landlock (or it is not enabled in the LSM list)"))
    seccomp = False
    if "seccomp" not in skip:
        try:
            from helix_runner.process.sandbox.seccomp_filter import compile_filter

            compile_filter()
            seccomp = _seccomp_in_kernel()
            if not seccomp:
                notes.append(("seccomp", "the kernel has no seccomp filter support"))
        except (ImportError, OSError, RuntimeError, ValueError) as exc:
            notes.append(("seccomp", f"libseccomp is not usable: {exc}"))
    return SandboxSupport(bwrap=bwrap, bwrap_version=version, userns=userns and "network" not in skip,
                          landlock_abi=abi, seccomp=seccomp, notes=tuple(notes))


def _seccomp_in_kernel() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False

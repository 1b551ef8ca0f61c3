"""What the kernel and the container allow the sandbox, found once at server start.

Each layer is checked on its own (bubblewrap present, a new user + network namespace, the
Landlock ABI, seccomp filters and libseccomp), then ``phase_sandbox.Sandbox.start`` runs one
probe through the shim exactly as a phase would and gives up layers that fail it. A layer named
in ``skip`` (config ``sandbox_skip_layers``) is reported as off "by configuration", which is how
the tests force the degraded modes.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from helix_runner.process.sandbox import landlock

LAYERS = ("namespaces", "network", "landlock", "seccomp")
# What says a layer is unavailable on this host rather than broken by this server: the kernel refuses
# or lacks the call. Anything else (a missing file, a bad argument) is the server's own fault, and
# ``sandbox = auto`` must not turn it into a layer quietly off.
UNAVAILABLE_ERRNOS = (errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EOPNOTSUPP)
# A new user namespace is also refused with ENOSPC (user.max_user_namespaces = 0) and EINVAL (a
# kernel built without them).
_USERNS_UNAVAILABLE = (*UNAVAILABLE_ERRNOS, errno.ENOSPC, errno.EINVAL)
_NETNS_EXIT = 3
_NETNS_PROBE = (
    "import sys; sys.path.insert(0, sys.argv[1]); from sandbox import netns\n"
    "try:\n    netns.enter([])\n"
    f"except OSError as exc:\n    print('errno', exc.errno, exc.strerror); sys.exit({_NETNS_EXIT})"
)


class SandboxBroken(Exception):
    """A layer's check or the start-up probe failed for a reason other than the host lacking the
    layer (one line for a person); the server stops rather than run phases with less."""


def says_unavailable(message: str) -> bool:
    """Whether an error text ends in the kernel's words for a refused or missing call (the C
    locale's, which the probes run under)."""
    text = message.rstrip(" .)\n")
    return any(text.endswith(os.strerror(code)) for code in UNAVAILABLE_ERRNOS)  # bwrap's and the shim's last words


@dataclass(frozen=True)
class SandboxSupport:
    """Per layer: available, or why not."""

    bwrap: str | None = None  # path of a working bubblewrap
    bwrap_version: str = ""
    bwrap_sized_tmpfs: bool = False  # ``--size`` before ``--tmpfs`` (bubblewrap 0.8+)
    userns: bool = False  # a new user + network namespace
    landlock_abi: int = 0
    seccomp: bool = False
    notes: tuple[tuple[str, str], ...] = ()  # (layer, why it is unavailable)

    def note(self, layer: str) -> str:
        return "; ".join(why for name, why in self.notes if name == layer)


def _run(argv: list[str]) -> tuple[int, str]:
    """The exit code (-1: could not run) and what the command said, in the C locale."""
    env = {**os.environ, "LC_ALL": "C"}
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20, check=False,
                              env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return -1, str(exc)
    return done.returncode, (done.stderr or done.stdout).decode(errors="replace").strip()[:300]


def _offers(bwrap: str, option: str) -> bool:
    """Whether ``bwrap --help`` lists ``option``."""
    try:
        done = subprocess.run([bwrap, "--help"], stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option.encode() in done.stdout + done.stderr


def detect(skip: frozenset[str] = frozenset(), bwrap_path: str | None = None) -> SandboxSupport:
    """Checks each layer (``skip``: layers turned off by configuration). A layer the host lacks is
    off with a note; SandboxBroken when a check fails for another reason."""
    notes: list[tuple[str, str]] = []
    for layer in sorted(skip):
        notes.append((layer, "turned off by configuration (sandbox_skip_layers)"))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # process/, where the shim runs
    userns = False
    if "network" not in skip or "namespaces" not in skip:
        code, why = _run([sys.executable, "-E", "-s", "-S", "-B", "-c", _NETNS_PROBE, here])
        userns = code == 0
        if not userns:
            words = why.split(maxsplit=2)
            if code != _NETNS_EXIT or len(words) < 2 or not words[1].isdigit() \
                    or int(words[1]) not in _USERNS_UNAVAILABLE:
                raise SandboxBroken(f"the check for user namespaces failed: {why.splitlines()[-1] if why else code}")
            notes.append(("network", f"no new user and network namespace: {words[2] if len(words) > 2 else why}"))
    bwrap, version, sized = None, "", False
    if "namespaces" not in skip:
        found = bwrap_path or shutil.which("bwrap")
        if found is None:
            notes.append(("namespaces", "bubblewrap (bwrap) is not installed"))
        elif not userns:
            notes.append(("namespaces", "bubblewrap needs unprivileged user namespaces, which this host refuses"))
        else:
            code, out = _run([found, "--version"])
            version = out.split()[-1] if code == 0 and out else ""
            sized = _offers(found, "--size")
            code, why = _run([found, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                              "--disable-userns", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc",
                              "--dev", "/dev", "--", "true"])
            if code == 0:
                bwrap = found
            elif says_unavailable(why):
                notes.append(("namespaces", f"bubblewrap cannot build a sandbox here: {why}"))
            else:
                raise SandboxBroken(f"bubblewrap ({found}) failed its check: {why or f'exit {code}'}")
    abi = 0 if "landlock" in skip else landlock.abi()
    if not abi and "landlock" not in skip:
        notes.append(("landlock", "the kernel has no Landlock (or it is not enabled in the LSM list)"))
    seccomp = False
    if "seccomp" not in skip:
        try:
            from helix_runner.process.sandbox.seccomp_filter import compile_filter
        except (ImportError, OSError) as exc:  # pyseccomp, or Debian's libseccomp2 under it, is missing
            notes.append(("seccomp", f"libseccomp is not installed: {exc}"))
        else:
            try:
                compile_filter()
            except Exception as exc:  # noqa: BLE001 - libseccomp refused our own filter: a bug, not the host
                raise SandboxBroken(f"libseccomp could not compile the phase filter: {exc}") from None
            seccomp = _seccomp_in_kernel()
            if not seccomp:
                notes.append(("seccomp", "the kernel has no seccomp filter support"))
    return SandboxSupport(bwrap=bwrap, bwrap_version=version, bwrap_sized_tmpfs=bool(bwrap) and sized,
                          userns=userns and "network" not in skip,
                          landlock_abi=abi, seccomp=seccomp, notes=tuple(notes))


def _seccomp_in_kernel() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False

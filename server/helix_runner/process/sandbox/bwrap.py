"""bubblewrap's command line for a phase's policy (``policy.py``): its mount namespace is the allowlist.

The sandbox's root is an empty tmpfs; only what the policy allows is bound into it, at the same
path as on the host (so the CLI's session files name the paths its resume will look for).
Hidden paths inside an allowed directory are covered (an empty tmpfs over a directory,
``/dev/null`` over a file). Also: a new PID namespace with its own ``/proc``, IPC, UTS and cgroup
namespaces, a minimal ``/dev``, the private temp directory at ``/tmp``, all capabilities
dropped, no further user namespaces, and ``--die-with-parent``. No network namespace here: the
shim has already moved the child into the phase's private network (``netns.py``).
"""

from __future__ import annotations

import os

from helix_runner.process.sandbox.policy import SandboxPolicy, masked

NAMESPACES = ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
              "--disable-userns")
# No --new-session: the CLI stays in the shim's session, which the key broker admits
# (process/key_broker.py; the model's Bash commands each get a session of their own anyway), and
# no terminal is there to inject into (the shim leads a session without one). Its process group is
# bubblewrap's, so the server and the shim signal the CLI by pid (supervisor._signal_cli).


def bwrap_argv(bwrap: str, policy: SandboxPolicy, *, extra_read_only: tuple[str, ...] = ()) -> list[str]:
    """``bwrap`` and its options up to (not including) ``--``; the shim adds ``--seccomp`` and the
    command."""
    # /tmp first: allowed paths may lie beneath the host's /tmp (they are mounted on top of it).
    argv = [bwrap, *NAMESPACES, "--die-with-parent", "--cap-drop", "ALL", "--bind", policy.tmp, "/tmp",
            "--dev", "/dev", "--proc", "/proc"]
    if os.path.isdir("/sys"):
        argv += ["--ro-bind", "/sys", "/sys"]
    covers = [p for p in masked(policy) if _reachable(p)]
    # Binds and covers in order of depth, a cover before a bind of the same depth: a cover inside
    # an allowed path comes after that path's bind, and an allowed path inside a cover after the
    # cover (an explicitly allowed path wins over a hidden one).
    steps: list[tuple[int, int, int, str, list[str]]] = []

    def step(path: str, kind: int, args: list[str]) -> None:
        steps.append((path.count("/"), kind, len(steps), path, args))

    for path in covers:
        step(path, 0, ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path])
    for path in (*policy.read_only, *extra_read_only):
        if os.path.islink(path) and os.path.dirname(path) == "/":
            step(path, 1, ["--symlink", os.readlink(path), path])  # /bin -> usr/bin on merged-/usr systems
        elif os.path.exists(path):
            step(path, 1, ["--ro-bind", path, path])
    # Not checked for existence: a git worktree is made after this argv (bwrap fails if it is missing).
    for path in policy.read_write:
        if path != policy.tmp:
            step(path, 1, ["--bind", path, path])
    for path in policy.private_read_only:  # may be written after this argv is made (process/secret_files.py)
        step(path, 1, ["--ro-bind-try", path, path])
    for *_, args in sorted(steps):
        argv += args
    for path in covers:
        if os.path.isdir(path):
            argv += ["--remount-ro", path]
    argv += ["--chdir", policy.cwd]
    return argv


def _reachable(path: str) -> bool:
    """Whether the phase could reach ``path`` if it were not covered: it exists and the server's
    user may read, write or enter it (a phase runs as that user, with no capability; root reads
    what its owner bits allow, so for root every existing path counts)."""
    if not os.path.lexists(path):
        return False
    return os.geteuid() == 0 or any(os.access(path, mode) for mode in (os.R_OK, os.W_OK, os.X_OK))

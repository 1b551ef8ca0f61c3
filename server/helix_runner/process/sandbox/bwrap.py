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


def bwrap_argv(bwrap: str, policy: SandboxPolicy, *, extra_read_only: tuple[str, ...] = ()) -> list[str]:
    """``bwrap`` and its options up to (not including) ``--``; the shim adds ``--info-fd``,
    ``--seccomp`` and the command."""
    # /tmp first: allowed paths may lie beneath the host's /tmp (they are mounted on top of it).
    argv = [bwrap, *NAMESPACES, "--die-with-parent", "--cap-drop", "ALL", "--bind", policy.tmp, "/tmp"]
    for path in (*policy.read_only, *extra_read_only):
        if os.path.islink(path) and os.path.dirname(path) == "/":
            argv += ["--symlink", os.readlink(path), path]  # /bin -> usr/bin on merged-/usr systems
        elif os.path.exists(path):
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    if os.path.isdir("/sys"):
        argv += ["--ro-bind", "/sys", "/sys"]
    covers = masked(policy)
    # Not checked for existence: a git worktree is made after this argv (bwrap fails if it is missing).
    read_write = [p for p in policy.read_write if p != policy.tmp]
    # A cover inside a read-write path must come after that path's bind, and a read-write path
    # inside a cover after the cover: bind, cover and re-bind in order of depth.
    steps = sorted([(p.count("/"), 0, p) for p in read_write] + [(p.count("/"), 1, p) for p in covers]
                   + [(p.count("/"), 2, p) for p in policy.private_read_only])
    for _, kind, path in steps:
        if kind == 0:
            argv += ["--bind", path, path]
        elif kind == 2:  # may be written after this argv is made (process/secret_files.py)
            argv += ["--ro-bind-try", path, path]
        elif os.path.isdir(path):
            argv += ["--tmpfs", path]
        elif os.path.exists(path):
            argv += ["--ro-bind", "/dev/null", path]
    for path in covers:
        if os.path.isdir(path):
            argv += ["--remount-ro", path]
    argv += ["--chdir", policy.cwd]
    return argv

"""bubblewrap's command line for a phase's policy (``policy.py``): its mount namespace is the allowlist.

The sandbox's root is an empty tmpfs; only what the policy allows is bound into it, at the same
path as on the host (so the CLI's session files name the paths its resume will look for).
Hidden paths inside an allowed directory are covered (an empty tmpfs over a directory,
``/dev/null`` over a file). Also: a new PID namespace with its own ``/proc``, IPC, UTS and cgroup
namespaces, a minimal ``/dev``, the private temp directory at ``/tmp``, all capabilities
dropped, no further user namespaces (bubblewrap's ``--disable-userns``, or the seccomp filter),
and ``--die-with-parent``. No network namespace here: the
shim has already moved the child into the phase's private network (``netns.py``).
"""

from __future__ import annotations

import os

from helix_runner.process.sandbox.policy import SandboxPolicy, masked, reachable

NAMESPACES = ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try")
# No --new-session: the CLI stays in the shim's session, which the key broker admits
# (process/key_broker.py; the model's Bash commands each get a session of their own anyway), and
# no terminal is there to inject into (the shim leads a session without one). Its process group is
# bubblewrap's, so the server and the shim signal the CLI by pid (supervisor._signal_cli).


def bwrap_argv(bwrap: str, policy: SandboxPolicy, *, extra_read_only: tuple[str, ...] = (),
               seccomp_denies_userns: bool = False, tmp_bytes: int = 0) -> list[str]:
    """``bwrap`` and its options up to (not including) ``--``; the shim adds ``--seccomp`` and the
    command. ``seccomp_denies_userns``: the phase's seccomp filter refuses new user namespaces, so
    bubblewrap's ``--disable-userns`` (a further nested user namespace, half a millisecond) is left out.
    ``tmp_bytes``: ``/tmp`` is a tmpfs of that size (the kernel answers ENOSPC past it, and its pages
    count toward the phase's memory limit) instead of the private temp directory on disk.
    Protected paths (``policy.protected``) are bound read-only over the writable tree: a mount
    point can be neither written, renamed nor removed.

    No ``/sys``: its recursive bind (every cgroup, security and debug file system under it) is the
    costliest mount here, and what tools read there has a fallback (``/proc`` for CPUs, no cgroup
    limit for Node); it also keeps the host's devices and cgroup tree out of sight."""
    # /tmp first: allowed paths may lie beneath the host's /tmp (they are mounted on top of it).
    tmp = ["--size", str(tmp_bytes), "--perms", "0700", "--tmpfs", "/tmp"] if tmp_bytes else ["--bind", policy.tmp, "/tmp"]
    argv = [bwrap, *NAMESPACES, *(() if seccomp_denies_userns else ("--disable-userns",)), "--die-with-parent",
            "--cap-drop", "ALL", *tmp, "--dev", "/dev", "--proc", "/proc"]
    covers = [p for p in masked(policy) if reachable(p)]
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
    for path in policy.protected:  # after the writable tree holding it, before a writable path inside it
        if os.path.lexists(path) and not os.path.islink(path):
            step(path, 1, ["--ro-bind", path, path])
    for *_, args in sorted(steps):
        argv += args
    for path in covers:
        if os.path.isdir(path):
            argv += ["--remount-ro", path]
    argv += ["--chdir", policy.cwd]
    return argv

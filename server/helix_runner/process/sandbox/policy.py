"""What one phase's processes may see: an allowlist of paths, pure data and pure functions.

Read-write: the phase's workspace, its ``add_dirs``, a git worktree's common directory, and its
private home and temp directory. Read-only: the system and the runtimes the CLI and ordinary
tools need, and the *protected* paths inside the read-write ones (a repository's git config,
hooks and attributes: ``repo_guard.py``). Hidden: everything else, and explicitly the paths that
must stay out of reach even when they lie inside an allowed directory (the data dir, the server's
config, token, TLS and key files, other workspaces, ``/etc/shadow``...). ``bwrap.py`` turns a
policy into mounts, and ``landlock_rules`` into Landlock rules (which cannot deny a path inside an
allowed directory, so such a directory is replaced by its other children, recursively).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Always read-only where they exist (merged-/usr symlinks are recreated as symlinks by bwrap.py).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# Never visible, wherever the allowlist would otherwise reach them.
SYSTEM_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssl/private",
                  "/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd", "/etc/helix-runner")
# The device nodes a phase may open where no mount namespace gives it a ``/dev`` of its own (Landlock
# alone), as bubblewrap's ``--dev`` offers them. Not the rest of the host's ``/dev``: ``/dev/shm``
# holds other processes' shared memory, ``/dev/pts`` other sessions' terminals, and a root server's
# owner bits would open its disks, ``/dev/kmsg`` and ``/dev/kvm``.
LANDLOCK_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


@dataclass(frozen=True)
class SandboxPolicy:
    """One phase's view of the file system, and the host loopback ports it may reach."""

    cwd: str
    read_only: tuple[str, ...]
    read_write: tuple[str, ...]
    hidden: tuple[str, ...]
    home: str
    tmp: str  # the private temp directory on the host (bound at /tmp under bubblewrap)
    egress_ports: tuple[int, ...] = ()
    # Read-only paths of the phase's own inside a hidden one (its option files in the data dir).
    private_read_only: tuple[str, ...] = ()
    # The workspace roots (also in ``hidden``): they hide what lies inside them, never a path the
    # policy allows by name (a phase whose directory *is* a root works in it).
    covered: tuple[str, ...] = ()
    # Read-only paths inside read-write ones (bubblewrap binds them read-only on top).
    protected: tuple[str, ...] = ()
    # Read-write directories Landlock may replace by their children to keep a protected path in
    # them read-only (losing the right to add entries at their top): a worktree's common git dir.
    splittable: tuple[str, ...] = ()


@functools.lru_cache(maxsize=4096)
def _norm(path: str) -> str:
    # Cached: a policy compares each path with every other (``outermost``, ``masked``), some 500
    # normalisations a phase for the same few dozen paths (benchmarks/README.md, P9).
    return os.path.normpath(path) if path else path


def inside(path: str, parent: str) -> bool:
    """Whether ``path`` is ``parent`` or beneath it (normalised, no symlink resolution)."""
    path, parent = _norm(path), _norm(parent)
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _unique(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_norm(p) for p in paths if p))


def make_policy(*, cwd: str, read_only: Iterable[str], read_write: Iterable[str], hidden: Iterable[str],
                home: str, tmp: str, covered: Iterable[str] = (), egress_ports: Iterable[int] = (),
                private_read_only: Iterable[str] = (), protected: Iterable[str] = (),
                splittable: Iterable[str] = ()) -> SandboxPolicy:
    """The policy with duplicates removed and read-only paths inside a hidden one dropped.

    ``hidden`` (the data dir, the server's secret files): nothing inside is visible but the
    phase's own read-write directories (its private home lives in the data dir). ``covered``
    (the workspace roots): invisible where an allowed directory holds them, but what is allowed
    inside them explicitly (the phase's workspace, a runtime) stays visible. A read-only path that
    is a read-write one, or beneath one, is dropped (it is writable already), and so is one beneath
    another read-only one (``outermost``: each bind costs bubblewrap a mount). ``private_read_only``
    paths (the phase's own option files, the key helper's socket) stay visible, read-only, wherever they are.
    """
    hidden_t = _unique(hidden)
    rw = _unique([*read_write, home, tmp])
    ro = tuple(p for p in _unique(read_only)
               if not any(inside(p, h) for h in hidden_t) and not any(inside(p, w) for w in rw))
    covered_t = _unique(covered)
    hidden_t = _unique([*hidden_t, *covered_t])
    ro = outermost(ro, hidden_t)
    guarded = tuple(p for p in _unique(protected) if any(inside(p, w) and p != w for w in rw))
    return SandboxPolicy(cwd=_norm(cwd), read_only=ro, read_write=rw, hidden=hidden_t, home=_norm(home),
                         tmp=_norm(tmp), egress_ports=tuple(sorted(set(egress_ports))),
                         private_read_only=_unique(private_read_only), covered=covered_t, protected=guarded,
                         splittable=tuple(p for p in _unique(splittable) if p in rw))


def outermost(paths: tuple[str, ...], hidden: tuple[str, ...]) -> tuple[str, ...]:
    """``paths`` without those that lie inside another of them (the outer one brings them along),
    unless a hidden path lies in between (its cover would hide them, so they need their own bind)."""
    def redundant(p: str) -> bool:
        return any(q != p and inside(p, q) and not any(inside(h, q) and inside(p, h) for h in hidden)
                   for q in paths)

    return tuple(p for p in paths if not redundant(p))


def masked(policy: SandboxPolicy) -> tuple[str, ...]:
    """The hidden paths that lie inside an allowed one (they must be covered up, before the
    read-write paths inside them are bound again); outermost first."""
    allowed = (*policy.read_only, *policy.read_write)
    out = [h for h in policy.hidden if any(inside(h, a) and h != a for a in allowed)]
    return tuple(sorted(out, key=lambda p: p.count("/")))


def landlock_rules(policy: SandboxPolicy, read: int, write: int,
                   listdir: Callable[[str], list[str]] = os.listdir) -> list[tuple[str, int]]:
    """(path, rights) rules for Landlock: each allowed path, with an allowed directory that holds
    a hidden path replaced by its children but the one leading there (recursively). A path the
    policy allows by name is not hidden by a workspace root it equals (``covered``). In a
    ``splittable`` directory, a protected path is kept read-only the same way: the directories on
    the way to it get read rights only, their other children the directory's own."""
    rules: list[tuple[str, int]] = []
    hide = policy.hidden  # a read-write path inside one gets its own rule below

    def add(path: str, rights: int, named: bool = False, guard: tuple[str, ...] = ()) -> None:
        inner = [h for h in hide if inside(h, path) and not (named and h == path and h in policy.covered)]
        kept = [g for g in guard if inside(g, path)]
        if any(g == path for g in kept):
            rules.append((path, rights & read))
            return
        if not inner and not kept:
            rules.append((path, rights))
            return
        if any(h == path for h in inner):
            return
        if kept:  # the directory itself stays readable (its children are what is read-only or not)
            rules.append((path, rights & read))
        try:
            children = listdir(path)
        except OSError:
            return
        for name in sorted(children):
            add(os.path.join(path, name), rights, guard=kept)

    for path in policy.read_only:
        add(path, read, named=True)
    for path in policy.private_read_only:
        rules.append((path, read))
    for path in policy.read_write:
        guard = policy.protected if path in policy.splittable else ()
        add(path, read | write, named=True, guard=guard)
    return rules


def reaches(rules: list[tuple[str, int]], path: str, rights: int) -> bool:
    """Whether Landlock ``rules`` give ``path`` (a directory) every right in ``rights`` (the union of
    the rules on it and its ancestors, as Landlock grants them)."""
    got = 0
    for rule_path, granted in rules:
        if inside(path, rule_path):
            got |= granted
    return got & rights == rights


def reachable(path: str) -> bool:
    """Whether a phase could reach ``path`` if the sandbox did not hide it (the one check here that
    asks the file system): it exists and the server's user may read, write or enter it. A phase
    runs as that user with no capability; root reads what its owner bits allow, so for root every
    existing path counts. Hiding an unreachable path would only cost a mount or, under Landlock,
    replacing its directory by all its other children."""
    if not os.path.lexists(path):
        return False
    return os.geteuid() == 0 or any(os.access(path, mode) for mode in (os.R_OK, os.W_OK, os.X_OK))

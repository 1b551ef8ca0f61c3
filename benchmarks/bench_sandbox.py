"""What the sandbox adds to a phase's start: the shim with the sandbox off vs each mode, side by side.

Issue 21 bounds the setup at 15 ms. Each round starts the phase shim (``python -E -s -S -B
phase_shim.py``, as the server does) once per mode, interleaved so machine noise hits the modes
alike, with ``/bin/date +%s%N`` as the phase's command. Three times per start, from just before
the spawn call:

* ``exec``: when the command ran (the time ``date`` prints): what the issue bounds;
* ``spawned``: when the shim's ``spawned <pid>`` status line arrived (the supervisor waits for it);
* ``teardown``: from the command's run to the shim's exit (the sandbox taken down, the CLI's
  status reported);

and ``cpu``: the CPU time (user + system) the shim and everything it reaped used, start to end,
which a busy machine disturbs less than the wall-clock times.

Modes: ``off`` (the baseline: no ``--sandbox``), ``all`` (bubblewrap namespaces, private network
with one relayed port, Landlock scopes, seccomp), and each degraded mode the server can fall into
(``sandbox_skip_layers``): without bubblewrap, without user namespaces (Landlock-only), without
Landlock, without seccomp. ``added`` is the mode's p50 minus the baseline's.

With ``--profile`` the shim records ``time.perf_counter_ns()`` marks (``HELIX_SHIM_PROFILE``) and
the table shows, per mode, the median time from the shim's first line to each mark.

    .venv/bin/python benchmarks/bench_sandbox.py [--rounds 60] [--profile] [--before CHECKOUT]

``--before`` measures an earlier checkout's shim in the same rounds (rows marked "(before)"),
so a change's effect is read side by side on the same noisy machine.

It measures and prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODES = {
    "all": (),
    "no bwrap": ("namespaces",),
    "landlock-only": ("namespaces", "network"),
    "no landlock": ("landlock",),
    "no seccomp": ("seccomp",),
}
COMMAND = ["/bin/date", "+%s%N"]


def _repo(path: Path) -> Path:
    """A git repository with git's template hooks: the phase's working directory, as in most phases."""
    path.mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["init", "-q"], ["-c", "user.name=b", "-c", "user.email=b@e", "commit", "-q", "--allow-empty",
                                 "-m", "start"]):
        subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True)
    return path


def build_modes(server: Path, root: Path) -> dict[str, tuple[str, list[str], dict[str, str]]]:
    """Mode -> (the shim's path, its sandbox arguments, the environment), with the server code in
    ``server`` (this checkout's, or an earlier one's for ``--before``). The phase works in a git
    repository with the server's defaults, as a phase does: where the checkout protects the
    repository's config and hooks and sizes ``/tmp``, that is part of what is measured. Also the
    server's side (``prepare``, and ``arm`` where there is one) per mode, as ``# ... prepare`` lines."""
    sys.path.insert(0, str(server))
    import compileall
    import inspect

    from helix_runner.config import ServerConfig
    from helix_runner.process.sandbox.phase_sandbox import SHIM_DIR, Sandbox

    compileall.compile_dir(SHIM_DIR, quiet=1)  # both checkouts' shim modules from cached bytecode
    env = {"PATH": "/usr/bin:/bin"}
    shim = str(SHIM_DIR / "phase_shim.py")
    modes = {"off": (shim, [], env)}
    repo = _repo(root / "repo")
    defaults = ServerConfig()
    start_kw = {"tmp_max_bytes": defaults.phase_tmp_max_bytes} \
        if "tmp_max_bytes" in inspect.signature(Sandbox.__init__).parameters else {}
    prepare_kw = {"repos": [repo]} if "repos" in inspect.signature(Sandbox.prepare).parameters else {}
    for name, skip in MODES.items():
        slug = name.replace(" ", "-")
        sandbox = Sandbox.start("auto", data_dir=root / slug, skip=skip, egress_ports=(9,), **start_kw)
        missing = [layer.name for layer in sandbox.report_layers() if not layer.active]
        print(f"# {name}: layers off: {', '.join(missing) or 'none'}", file=sys.stderr)
        server_ms = []
        for i in range(21):
            began = time.perf_counter_ns()
            phase = sandbox.prepare(f"bench-{i}", cwd=str(repo), project="", root=root / f"home-{slug}-{i}",
                                    read_write=[str(repo / ".git")], **prepare_kw)
            if hasattr(phase, "arm"):
                phase.arm()
            server_ms.append((time.perf_counter_ns() - began) / 1e6)
        print(f"# {name}: server side (prepare{' + arm' if hasattr(phase, 'arm') else ''}) p50 "
              f"{statistics.median(server_ms):.2f} ms", file=sys.stderr)
        modes[name] = (shim, phase.shim_args(), {**env, **phase.env})
    return modes


def _once(shim: str, args: list[str], cwd: str, env: dict[str, str], trace: Path | None) -> dict[str, float]:
    status_r, status_w = os.pipe()
    if trace is not None:
        env = {**env, "HELIX_SHIM_PROFILE": str(trace)}
    cmd = [sys.executable, "-E", "-s", "-S", "-B", shim, "--status-fd", str(status_w), *args, "--", *COMMAND]
    began = time.time_ns()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            pass_fds=(status_w,))
    os.close(status_w)
    with os.fdopen(status_r, "rb") as status:
        line = status.readline()
        spawned = time.time_ns()
        assert line.startswith(b"spawned "), line
        out = proc.stdout.read()
        _, raw, usage = os.wait4(proc.pid, 0)  # the shim's CPU time includes its reaped descendants'
        proc.returncode = os.waitstatus_to_exitcode(raw)
        ended = time.time_ns()
        status.read()
    assert proc.returncode == 0, (proc.returncode, out)
    ran = int(out.split()[0])
    times = {"exec": (ran - began) / 1e6, "spawned": (spawned - began) / 1e6, "teardown": (ended - ran) / 1e6,
             "cpu": (usage.ru_utime + usage.ru_stime) * 1000}
    if trace is not None and trace.exists():
        times.update(_marks(trace, began))
    return times


def _marks(trace: Path, began: int) -> dict[str, float]:
    """The shim's marks of one start, in ms from the spawn call."""
    lines = trace.read_text().splitlines()
    trace.unlink()
    return {f"@{name}": (int(ns) - began) / 1e6 for name, _, ns in (x.rpartition("=") for x in lines)}


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--profile", action="store_true", help="print the shim's own marks per mode")
    parser.add_argument("--before", type=Path, help="an earlier checkout, measured in the same rounds "
                        "(e.g. `git worktree add /tmp/before <commit>`)")
    parser.add_argument("--emit-modes", nargs=2, metavar=("SERVER", "ROOT"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.emit_modes:  # run under --before's checkout: its modes, as JSON
        print(json.dumps(build_modes(Path(opts.emit_modes[0]), Path(opts.emit_modes[1]))))
        return
    root = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    modes = {}
    if opts.before is not None:
        (root / "before").mkdir()
        done = subprocess.run([sys.executable, __file__, "--emit-modes", str(opts.before / "server"),
                               str(root / "before")], check=True, capture_output=True, text=True)
        for line in done.stderr.splitlines():
            if line.startswith("# "):
                print(line.replace(":", " (before):", 1), file=sys.stderr)
        modes = {f"{name} (before)": tuple(value) for name, value in json.loads(done.stdout).items()}
    modes.update(build_modes(ROOT / "server", root))
    trace = root / "trace" if opts.profile else None
    times: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
    cwd = str(root / "repo")  # each checkout's modes ran their phase there; the "before" one has its own copy
    for _ in range(3):  # warm the page cache
        for mode, (shim, args, mode_env) in modes.items():
            _once(shim, args, str(root / "before" / "repo") if mode.endswith("(before)") else cwd, mode_env, None)
    for _ in range(opts.rounds):
        for mode, (shim, args, mode_env) in modes.items():
            where = str(root / "before" / "repo") if mode.endswith("(before)") else cwd
            for key, value in _once(shim, args, where, mode_env, trace).items():
                times[mode].setdefault(key, []).append(value)
    base = {k: statistics.median(v) for k, v in times["off"].items()}
    print(f"{opts.rounds} rounds; ms from the spawn call; added = p50 minus the baseline's (off)")
    print(f"{'mode':<23} {'exec p50':>8} {'p99':>6} {'added':>6}   {'spawned p50':>11} {'p99':>6} {'added':>6}"
          f"   {'teardown p50':>12} {'p99':>6}   {'cpu p50':>7} {'added':>6}")
    for mode, t in times.items():
        e, s, d, c = (statistics.median(t[k]) for k in ("exec", "spawned", "teardown", "cpu"))
        print(f"{mode:<23} {e:8.1f} {_pct(t['exec'], .99):6.1f} {e - base['exec']:+6.1f}   {s:11.1f} "
              f"{_pct(t['spawned'], .99):6.1f} {s - base['spawned']:+6.1f}   {d:12.1f} {_pct(t['teardown'], .99):6.1f}"
              f"   {c:7.1f} {c - base['cpu']:+6.1f}")
    if trace is not None:
        print("\nthe shim's marks (median ms from the spawn call)")
        for mode, by_name in times.items():
            print(f"{mode:<23} " + "  ".join(f"{name[1:]} {statistics.median(v):.1f}" for name, v in by_name.items()
                                             if name.startswith("@")))


if __name__ == "__main__":
    main()

"""What the model's Bash runs inside a real phase for tests/support/phase_box.py: legitimate work, traps
left in the phase's repository, and output and processes past the phase's limits.

A standalone script, standard library only (``/usr/bin/python3 box_battery.py GROUP ARG``), copied
into the phase's directory. Each step prints one JSON line ``{"probe": name, "ok": bool, "note": ...}``:
``ok`` says whether the step did what it tried (for legitimate work: it worked; for a trap: the write
went through, which the tests then judge by its effect from outside).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def report(probe: str, ok: bool, note: str = "") -> None:
    print(json.dumps({"probe": probe, "ok": ok, "note": note[-200:]}), flush=True)


def sh(probe: str, command: str, timeout: float = 120) -> bool:
    """Runs ``command`` with bash; reports whether it exited 0."""
    try:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        report(probe, False, "timed out")
        return False
    report(probe, done.returncode == 0, (done.stderr or done.stdout).strip())
    return done.returncode == 0


GIT = "git -c user.name=box -c user.email=box@example.invalid"


def legit(registry: str) -> None:
    """What ordinary work does: list and write its directory, git, Python, pipelines, its TMPDIR, and a
    package install through the egress proxy from ``registry`` (host:port of a PEP 503 index)."""
    sh("list", "ls . >/dev/null && ls -a . | grep -qx .hxbox && cat README.md >/dev/null")
    sh("write", "echo mine > hxbox-own.txt && test \"$(cat hxbox-own.txt)\" = mine")
    sh("mkdir", "mkdir -p hxbox-dir/sub && echo x > hxbox-dir/sub/f && rm -r hxbox-dir")
    sh("git", f"git add hxbox-own.txt && {GIT} commit -q -m box && git log --oneline -1 | grep -q box")
    sh("branch", "git checkout -q -b hxbox-branch && git checkout -q - && git branch -q -D hxbox-branch")
    sh("python", "test \"$(python3 -c 'print(6 * 7)')\" = 42")
    sh("pipeline", "test \"$(seq 1 5 | sort -r | head -1)\" = 5")
    sh("tmpdir", "echo t > \"$TMPDIR/hxbox\" && test \"$(cat \"$TMPDIR/hxbox\")\" = t")
    pip = ("/usr/bin/python3 -m pip --disable-pip-version-check --no-cache-dir install --retries 0 --timeout 15 "
           f"--no-deps --index-url http://{registry}/simple/ --target hxbox-site helixdemo")
    sh("pip", f"{pip} && /usr/bin/python3 -c 'import sys; sys.path.insert(0, \"hxbox-site\"); import helixdemo'")


def _hook(marker: str) -> str:
    return f"#!/bin/sh\ntouch {marker}\n"


def _write(probe: str, path: str, text: str, mode: str = "w", exe: bool = False) -> None:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, mode) as f:
            f.write(text)
        if exe:
            os.chmod(path, 0o755)
        report(probe, True)
    except OSError as exc:
        report(probe, False, f"{type(exc).__name__}: {exc}")


def repo(markers: str) -> None:
    """Traps a hostile phase leaves in its repository for the user, the server and later phases: each
    runs ``touch <markers>/<name>`` when git (or Claude Code) later does what it names."""
    common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], capture_output=True,
                            text=True).stdout.strip()
    own = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-dir"], capture_output=True,
                         text=True).stdout.strip()
    m = markers
    _write("config", f"{common}/config",
           f"[core]\n\tfsmonitor = \"touch {m}/fsmonitor\"\n"
           f"[alias]\n\tst = \"!touch {m}/alias\"\n[diff \"hx\"]\n\ttextconv = \"touch {m}/textconv\"\n", "a")
    _write("hook", f"{common}/hooks/post-checkout", _hook(f"{m}/post-checkout"), exe=True)
    _write("hook_commit", f"{common}/hooks/pre-commit", _hook(f"{m}/pre-commit"), exe=True)
    _write("attributes", f"{common}/info/attributes", "* diff=hx\n")
    _write("gitmodules", ".gitmodules", f"[submodule \"x\"]\n\tpath = x\n\turl = ext::sh -c touch% {m}/submodule\n",
           "a")
    _write("claude_settings", ".claude/settings.json", json.dumps(
        {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": f"touch {m}/claude-hook"}]}]}}))
    _write("mcp_json", ".mcp.json", json.dumps({"mcpServers": {"x": {"command": "touch", "args": [f"{m}/mcp"]}}}))
    # Out of the way and back: a whole new hooks directory (a bind cannot be renamed).
    try:
        os.rename(f"{common}/hooks", f"{common}/hooks-away")
        os.mkdir(f"{common}/hooks")
        _write("hooks_swapped", f"{common}/hooks/post-commit", _hook(f"{m}/post-commit"), exe=True)
    except OSError as exc:
        report("hooks_swapped", False, f"{type(exc).__name__}: {exc}")
    if own != common:  # a linked worktree: its redirects to another git directory
        fake = os.path.abspath("hxbox-fake-git")
        subprocess.run(["cp", "-r", common, fake], capture_output=True)
        with open(f"{fake}/config", "a") as f:
            f.write(f"[core]\n\tfsmonitor = \"touch {m}/redirected\"\n")
        _write("commondir", f"{own}/commondir", fake + "\n")
        _write("gitfile", ".git", f"gitdir: {fake}\n")
    # Work still works: commits, refs and the index.
    sh("commit", f"echo work > hxbox-work.txt && git add hxbox-work.txt && {GIT} -c core.hooksPath=/dev/null "
                 "-c core.fsmonitor= commit -q -m work && git log --oneline -1 | grep -q work")


# Every family of git-config(1) and gitattributes(5) that makes git run a program, each writing its
# own marker (``hg-<family>``) when it runs: what the server's own git must never run (issue 30.1).
HOST_GIT_FAMILIES = ("clean", "smudge", "process", "textconv", "diffcmd", "external", "fsmonitor", "pager",
                     "editor", "ssh", "gpg", "credential", "askpass", "merge", "proxy", "include", "hook", "eqname",
                     "alias")
# A file outside the workspace, beside the markers (``<markers>/../outside``, laid out by phase_box):
# the repository's ``core.worktree`` points the server's git at it; it must never reach the diff.
OUTSIDE_SECRET = "hxbox-outside-secret"


def hostgit(markers: str) -> None:
    """Plants every program-running family in the phase's repository (config, attributes, hooks and
    an included file), and leaves work for the server's git: files its filters and drivers apply to."""
    m = markers

    def run(name: str) -> str:  # a program that leaves its marker and passes its input through (quoted:
        return f"\"sh -c 'touch {m}/hg-{name}; cat'\""  # a bare ';' starts a comment in git config)

    # First the attributes and the files they select, committed while nothing is planted yet (a
    # worktree made later checks them out through the smudge and process filters).
    # ``x=y``: a driver whose name holds '=' (``-c filter.x=y.clean=`` is read as the key ``filter.x``).
    _write("attributes", ".gitattributes",
           "*.txt filter=hx diff=hx merge=hx\n*.p filter=hp\n*.i filter=inc\n*.e filter=x=y diff=x=y\n")
    for name in ("a.txt", "b.p", "c.i", "e.e"):
        _write(f"file_{name}", name, f"{name}\n")
    sh("commit_clean", f"git add .gitattributes a.txt b.p c.i e.e && {GIT} -c core.hooksPath=/dev/null commit -q -m attrs")
    hooks = os.path.abspath(".hxhooks")
    os.makedirs(hooks, exist_ok=True)
    for hook in ("post-checkout", "reference-transaction", "post-index-change", "pre-commit", "post-commit"):
        _write(f"hook_{hook}", f"{hooks}/{hook}", _hook(f"{m}/hg-hook"), exe=True)
        _write(f"githook_{hook}", f".git/hooks/{hook}", _hook(f"{m}/hg-hook"), exe=True)
    _write("include_file", ".hxinc", f"[core]\n\thooksPath = {hooks}\n[filter \"inc\"]\n\tclean = {run('include')}\n")
    _write("config", ".git/config",
           f"[core]\n\tfsmonitor = \"touch {m}/hg-fsmonitor\"\n\tpager = \"touch {m}/hg-pager; cat\"\n"
           f"\teditor = \"touch {m}/hg-editor\"\n\tsshCommand = \"touch {m}/hg-ssh\"\n"
           f"\taskPass = \"touch {m}/hg-askpass\"\n\tgitProxy = \"touch {m}/hg-proxy\"\n"
           f"\thooksPath = {hooks}\n"
           f"[filter \"hx\"]\n\tclean = {run('clean')}\n\tsmudge = {run('smudge')}\n"
           f"[filter \"x=y\"]\n\tclean = {run('eqname')}\n\tsmudge = {run('eqname')}\n"
           f"[diff \"x=y\"]\n\ttextconv = {run('eqname')}\n"
           f"[alias]\n\tdiff = \"!touch {m}/hg-alias\"\n\tadd = \"!touch {m}/hg-alias\"\n"
           f"\tworktree = \"!touch {m}/hg-alias\"\n"
           f"[filter \"hp\"]\n\tprocess = \"touch {m}/hg-process\"\n"
           f"[diff \"hx\"]\n\ttextconv = \"touch {m}/hg-textconv\"\n\tcommand = \"touch {m}/hg-diffcmd\"\n"
           f"[diff]\n\texternal = \"touch {m}/hg-external\"\n"
           f"[merge \"hx\"]\n\tdriver = \"touch {m}/hg-merge\"\n"
           f"[gpg]\n\tprogram = \"touch {m}/hg-gpg\"\n[commit]\n\tgpgSign = true\n"
           f"[credential]\n\thelper = \"!touch {m}/hg-credential\"\n"
           f"[include]\n\tpath = {os.path.abspath('.hxinc')}\n"
           f"[includeIf \"gitdir:/\"]\n\tpath = {os.path.abspath('.hxinc')}\n", "a")
    _write("info_attributes", ".git/info/attributes", "* diff=hx\n")
    for name in ("a.txt", "b.p", "c.i", "e.e"):  # work for the server's diff of this phase
        _write(f"work_{name}", name, f"work in {name}\n", "a")


def hostgit_worktree(markers: str) -> None:
    """Points the repository's ``core.worktree`` at a directory outside the workspace (beside the
    markers), and leaves work: the server's git must still see this working tree, not that one.
    (A phase of its own: with the other families planted, the redirect would hide their files.)"""
    outside = os.path.join(os.path.dirname(markers), "outside")
    _write("config", ".git/config", f"[core]\n\tworktree = {outside}\n", "a")
    _write("work", "w.txt", "work\n")


def worktree_work(markers: str) -> None:
    """A phase in a git worktree of the planted repository: it changes a file the filters apply to."""
    _write("work", "d.txt", "more work\n")


def optin(markers: str) -> None:
    """With ``allow_repository_config_writes`` the phase may change its git config."""
    _write("config", ".git/config", "[hxbox]\n\toptin = yes\n", "a")


def _own_cli() -> int:
    """The CLI running this tool: the nearest ancestor started with ``stream-json``."""
    pid = os.getppid()
    for _ in range(16):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"stream-json" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    raise SystemExit("no CLI among this tool's ancestors")


def flood(kind: str) -> None:
    """Writes into the CLI's own stdout (the pipe the server reads): ``line``, 8 MiB without a newline;
    ``output``, 64 MiB of lines that are not JSON. Then waits to be stopped."""
    try:
        with open(f"/proc/{_own_cli()}/fd/1", "wb", buffering=0) as out:
            if kind == "line":
                for _ in range(8):
                    out.write(b"a" * (1 << 20))
            else:
                line = b"b" * (60 << 10) + b"\n"
                for _ in range(64 * 17):
                    out.write(line)
        report(f"flood_{kind}", True)
    except OSError as exc:
        report(f"flood_{kind}", False, f"{type(exc).__name__}: {exc}")
    time.sleep(30)


def disk_flood(_: str) -> None:
    """Grows the workspace: one 32 MiB file (the kernel stops it at the phase's cap, EFBIG), then 1 MiB
    files, 200 MiB at most, then waits to be stopped. What the big file holds is judged from outside."""
    os.makedirs("hx-disk", exist_ok=True)
    chunk = b"d" * (1 << 20)
    try:
        with open("hx-disk/big.bin", "wb", buffering=0) as f:
            for _ in range(32):
                f.write(chunk)
        report("disk_big", False, "32 MiB written")
    except OSError as exc:
        report("disk_big", exc.errno == 27, f"{type(exc).__name__}: {exc}")  # EFBIG
    for i in range(200):
        with open(f"hx-disk/f{i}.bin", "wb") as f:
            f.write(chunk)
        time.sleep(0.02)
    report("disk_many", False, "200 MiB written and not stopped")
    time.sleep(30)


def egress_flood(address: str) -> None:
    """Downloads 4 MiB at a time through the egress proxy (the phase's http_proxy) from the stand-in
    registry, 16 times; reports how many bytes came; then waits to be stopped."""
    import urllib.request

    got = 0
    try:
        for _ in range(16):
            with urllib.request.urlopen(f"http://{address}/big/{4 << 20}", timeout=30) as answer:
                while chunk := answer.read(1 << 16):
                    got += len(chunk)
        report("flood_egress", True, f"{got} bytes")
    except OSError as exc:
        report("flood_egress", False, f"{got} bytes, then {type(exc).__name__}: {exc}")
    time.sleep(30)


def forkbomb(most: str) -> None:
    """Starts processes (each a ``sleep``) until a fork fails or ``most`` run; reports how many; gives
    the server a few seconds to notice, then ends them."""
    children: list[int] = []
    note = ""
    count = os.open("hxbox-forked", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(int(most)):
            pid = os.fork()
            if pid == 0:
                os.execv("/bin/sleep", ["sleep", "60"])
            children.append(pid)
            os.pwrite(count, f"{len(children):<8}".encode(), 0)  # read from outside: the CLI may die first
    except OSError as exc:
        note = f"{type(exc).__name__}: {exc}"
    report("forked", True, f"{len(children)} {note}")
    time.sleep(5)
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass


def stream(lines: str) -> None:
    """A neighbour's ordinary streaming work: lines of output, a little at a time."""
    for i in range(int(lines)):
        print(f"neighbour line {i}", flush=True)
        time.sleep(0.01)
    report("streamed", True)


if __name__ == "__main__":
    group, arg = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    {"legit": legit, "repo": repo, "optin": optin, "hostgit": hostgit, "hostgit_worktree": hostgit_worktree,
     "worktree_work": worktree_work, "flood": flood, "disk_flood": disk_flood, "egress_flood": egress_flood, "forkbomb": forkbomb,
     "stream": stream}[group](arg)

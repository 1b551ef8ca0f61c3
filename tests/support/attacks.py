"""A realistic server attacked from inside one of its own phases (the suite in tests/security/).

``run_attack_scenario(user)`` builds, with the server as ``root`` or as ``nobody`` (``setpriv``):

- the main server ``S`` as deployed by default: loopback, no token, the dashboard (Connect API)
  and ``/metrics`` on ports of their own, SQLite (WAL) and recordings in its data dir (outside
  every workspace root), a real-looking API key in its environment (the recommended deployment:
  key-helper mode) and the scripted Messages API as its upstream;
- a second server ``T`` set up as a hardened one would be: a bearer token (``--auth-token-file``)
  and TLS (``--tls-cert-file``/``--tls-key-file``) on its command line, and one finished job;
- on ``S``, another job's **victim** phase in another project and workspace, alive and held at a
  breakpoint (so its CLI process exists), with a 0600 secret file in its workspace, a secret in its
  environment, an MCP server credential in its options and its CLI's session transcript; and a
  second held phase of a third job, to be cancelled;
- test-owned endpoints standing in for internal services: TCP on loopback, on a link-local address
  (169.254.169.254, placed on ``lo`` while the scenario runs; root only), on this host's own
  non-loopback address (another host), UDP (a DNS server) and an abstract unix socket;
- the **attacker** phase of a fourth job: the real CLI, whose scripted model runs
  ``attack_battery.py`` (copied into the attacker's own workspace) through its Bash tool, one group
  of probes per tool call; each probe prints one JSON line into the tool result, which is read here
  from the phase's event stream;
- two **later** phases, started once the attacker's ended: one of another project in another
  workspace, one of the attacker's project in its workspace (the project's next job), to see what
  the attacker left behind (hooks, an MCP server, git and shell start-up files, ``/tmp``).

Every secret is a fresh marker (``hxm-<role>-<16 hex>``, see ``attack_battery.evidence``) that the
attacker is never told. Whether an attack succeeded is decided by evidence (the marker came back in
what the probe obtained) or by an effect observed from outside after the attacker's phase ended (a
listener saw the payload, a file exists, the victim was cancelled or stopped, a process outlived
the phase). So the tests hold whatever the protections look like: a hidden path, a refused
connection or an invisible pid are all refusals. A refusal only counts when the setup shows the
target was there to attack (``setup_problems``: a listener the test itself could not reach, a
victim that had died, a later phase that did not run its command); otherwise the test fails.
Everything is torn down before the tests read the ``AttackOutcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.config import DEFAULT_INHERIT_ENV
from helix_runner.offline import Reply, RequestMatcher, Script, ScriptedApi
from support import attack_battery
from support.certs import CertificateAuthority
from support.processes import (
    NOBODY,
    SERVER_SRC,
    alive,
    as_nobody,
    nobody_env,
    nobody_python,
    serve_argv,
    serving_port,
)
from support.streams import Stream, breakpoint_hit

SERVER_USERS = ("root", "nobody")
# Sandbox modes the scenario runs in: name -> the layers turned off (config ``sandbox_skip_layers``).
# ``landlock-only`` is what most Kubernetes pods get (RuntimeDefault refuses user namespaces, so no
# bubblewrap and no private network): Landlock's file and TCP rules, its scopes, and seccomp.
SANDBOX_MODES = {"every-layer": (), "landlock-only": ("namespaces", "network")}
# What the server must report in each mode (``GetServerStatus``), or the scenario attacks the wrong thing.
MODE_LAYERS = {"every-layer": {"namespaces": True, "network": True, "landlock": True, "seccomp": True},
               "landlock-only": {"namespaces": False, "network": True, "landlock": True, "seccomp": True}}
# (sandbox mode, server user): every mode as both users.
SCENARIOS = tuple((mode, user) for mode in SANDBOX_MODES for user in SERVER_USERS)
BATTERY_GROUPS = ("stores", "api", "net", "host", "procs", "writes")
LINK_LOCAL = "169.254.169.254"
HOLD = "HOLD-HERE"  # the victims' second Bash call carries it; their breakpoint holds it
VICTIM_JOB, CANCEL_JOB, GATED_JOB, ATTACKER_JOB = "victim-job", "cancel-job", "gated-job", "attacker-job"
ATTACKER_PROJECT = "attacker-proj"
SECRET_ROLES = ("vprompt", "vtool", "venv", "vfile", "vsecret", "vmcp", "vproj", "tproj", "token", "inject",
                "gate", "tcp", "linklocal", "otherhost", "udp", "abstract", "outlive", "cgescape", "write", "tamper",
                "tmp", "gitcfg", "rc", "unixpath", "otheregress", "shm", "sysv", "blockdev", "vsys", "tty")
VICTIM_PROBES = ("victim_environ", "victim_memory", "ptrace_victim", "stop_victim", "inject_message")


def marker(role: str) -> str:
    """A fresh secret of the shape the probes look for (``attack_battery.MARKER``)."""
    return f"hxm-{role}-{secrets.token_hex(8)}"


def api_key_evidence(key: str) -> str:
    """How a probe reports having seen ``key`` (``attack_battery.evidence``)."""
    return attack_battery.evidence(key.encode())[0]


@dataclass(repr=False)
class AttackOutcome:
    """What the attacker's probes reported and what was observed from outside, for one server user
    and sandbox mode."""

    user: str
    mode: str
    secrets: dict[str, str]
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    effects: dict[str, Any] = field(default_factory=dict)
    # probe -> why its refusal would prove nothing (the target was not there to attack)
    setup_problems: dict[str, str] = field(default_factory=dict)
    # probe -> why this machine cannot stage it (a skip, with the reason)
    unavailable: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # short: assertion messages show it
        return f"AttackOutcome({self.who}: {len(self.probes)} probes reported)"

    @property
    def who(self) -> str:
        return f"as {self.user}, {self.mode}"

    def probe(self, name: str) -> dict[str, Any]:
        """The probe's report; fails the test if the probe did not report or its target was missing."""
        if name in self.unavailable:
            pytest.skip(self.unavailable[name])
        assert name not in self.setup_problems, f"{self.who}, {name} proves nothing: {self.setup_problems[name]}"
        assert name in self.probes, (
            f"{self.who}, probe {name} did not report: the battery did not run as planned "
            f"(the attacker phase: {self.effects.get('attacker_result')}; the battery's output, by group: "
            f"{self.effects.get('battery_output')})")
        return self.probes[name]

    def found(self, name: str) -> list[str]:
        return self.probe(name)["found"]

    def describe(self, name: str) -> str:
        report = self.probe(name)
        return f"{self.who}, {name} got {report['found']} ({report['note']})"


# --------------------------------------------------------------------------------------------------
# Test-owned endpoints the attacker tries to reach
# --------------------------------------------------------------------------------------------------


class Listener:
    """A TCP, UDP, abstract-unix or pathname-unix endpoint standing in for an internal service;
    keeps what reaches it. ``name``: the abstract socket's name, or the pathname socket's path."""

    def __init__(self, kind: str, host: str = "127.0.0.1", name: str = "", port: int = 0):
        self.kind = kind
        family = socket.AF_UNIX if kind in ("abstract", "unix") else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
        try:
            self.sock.bind("\0" + name if kind == "abstract" else name if kind == "unix" else (host, port))
        except OSError:
            self.sock.close()
            raise
        if kind != "udp":
            self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.address = name if kind in ("abstract", "unix") else list(self.sock.getsockname())
        self._received = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"listener-{kind}")
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                if self.kind == "udp":
                    self._received += self.sock.recvfrom(4096)[0]
                    continue
                conn, _ = self.sock.accept()
            except OSError:  # the accept timeout, or the socket closed by stop()
                continue
            with conn:
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):
                    self._received += conn.recv(4096)

    def saw(self, payload: str) -> bool:
        return payload.encode() in self._received

    def reachable(self) -> bool:
        """Whether the test itself still reaches it (so a phase that did not was refused, not unlucky)."""
        payload = f"control-{secrets.token_hex(4)}"
        with contextlib.suppress(OSError):
            family = socket.AF_UNIX if self.kind in ("abstract", "unix") else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM if self.kind == "udp" else socket.SOCK_STREAM) as sock:
                sock.settimeout(2.0)
                target = ("\0" + self.address if self.kind == "abstract" else self.address if self.kind == "unix"
                          else tuple(self.address))
                if self.kind == "udp":
                    sock.sendto(payload.encode(), target)
                else:
                    sock.connect(target)
                    sock.sendall(payload.encode())
        deadline = time.monotonic() + 2.0
        while not self.saw(payload) and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.saw(payload)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.sock.close()


@contextlib.contextmanager
def link_local_address() -> Iterator[str | None]:
    """169.254.169.254 on ``lo`` while the block runs (root only), standing in for a cloud metadata
    endpoint; None where it cannot be placed. Removed afterwards unless it was there before."""
    added = False
    with socket.socket() as probe:
        try:
            probe.bind((LINK_LOCAL, 0))
            present = True
        except OSError:
            present = False
    if not present and os.geteuid() == 0 and shutil.which("ip"):
        added = subprocess.run(["ip", "addr", "add", f"{LINK_LOCAL}/32", "dev", "lo"],
                               capture_output=True, timeout=10).returncode == 0
    try:
        yield LINK_LOCAL if present or added else None
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{LINK_LOCAL}/32", "dev", "lo"], capture_output=True, timeout=10)


def sysv_segment(text: str, user: str) -> int:
    """A SysV shared memory segment holding ``text``, made by a process of ``user`` (whose uid then
    owns it, mode 0600) that has exited since; its id. The caller removes it (``remove_sysv_segment``)."""
    code = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); libc.shmat.restype = ctypes.c_void_p; "
            "data = sys.argv[1].encode(); i = libc.shmget(0, 4096, 0o1600); "  # IPC_PRIVATE, IPC_CREAT | 0600
            "assert i >= 0, ctypes.get_errno(); a = libc.shmat(i, None, 0); ctypes.memmove(a, data, len(data)); "
            "libc.shmdt(ctypes.c_void_p(a)); print(i)")
    python = sys.executable if user == "root" else nobody_python()
    assert python is not None
    argv = [python, "-c", code, text]
    done = subprocess.run(as_nobody(*argv) if user == "nobody" else argv, capture_output=True, text=True, timeout=30,
                          check=True)
    return int(done.stdout)


def remove_sysv_segment(shmid: int) -> None:
    ctypes.CDLL(None, use_errno=True).shmctl(shmid, 0, None)  # IPC_RMID (root: CAP_IPC_OWNER)


def loop_device(image: Path) -> str:
    """``image`` attached read-only to a free loop device (root, util-linux): a raw disk holding data."""
    done = subprocess.run(["losetup", "--read-only", "--find", "--show", str(image)], capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.strip()


def other_host_address() -> str | None:
    """This machine's own non-loopback IPv4 address, standing in for another host on its network."""
    if not shutil.which("ip"):
        return None
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         timeout=10).stdout
    for address in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out):
        if not ipaddress.ip_address(address).is_link_local:
            return address
    return None


# --------------------------------------------------------------------------------------------------
# Servers, phases and processes seen from outside
# --------------------------------------------------------------------------------------------------


@dataclass
class ServeProcess:
    """A ``helix-runner serve`` child (as root, or as nobody through setpriv) and what its log says."""

    proc: subprocess.Popen
    log: Path
    port: int = 0
    web_port: int | None = None
    metrics_port: int | None = None
    containment: str = ""

    @classmethod
    def start(cls, user: str, root: Path, log: Path, env: dict[str, str], *extra: str,
              workspace_root: Path) -> ServeProcess:
        python = sys.executable if user == "root" else nobody_python()
        assert python is not None
        argv = serve_argv(python, root, *extra, workspace_root=workspace_root)
        if user == "root":
            full_env = {"PATH": os.environ["PATH"], **env}
        else:
            argv = as_nobody(*argv)
            full_env = nobody_env(**env)
        with open(log, "w") as stderr:
            proc = subprocess.Popen(argv, env=full_env, cwd="/", stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True)
        return cls(proc, log)

    def wait_serving(self, limit_s: float = 60.0) -> ServeProcess:
        self.port = serving_port(self.log, self.proc, limit_s)
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                message = record.get("msg") if isinstance(record, dict) else None
                if message == "dashboard":
                    self.web_port = int(record["url"].rstrip("/").rsplit(":", 1)[1])
                elif message == "serving metrics":
                    self.metrics_port = int(record["address"].rsplit(":", 1)[1])
                elif message == "containment":
                    self.containment = str(record.get("mode", ""))
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def run_phase(stub, *, job_id: str, project_id: str, workdir: Path, prompt: str, timeout: float = 300,
              **options: Any) -> Stream:
    """RunPhase (phase ``p``) read in the background; an RPC error is kept, not raised."""
    request = pb.RunPhaseRequest(job_id=job_id, phase_id="p", project_id=project_id, prompt=prompt,
                                 working_dir=str(workdir), options=pb.PhaseOptions(**options))
    return Stream(stub.RunPhase(request, timeout=timeout), wait_limit=90, keep_error=True)


def ended(stream: Stream) -> str:
    """How a finished phase ended, in words."""
    if stream.result is None:
        return f"no result ({stream.error!r})"
    return f"{res.PhaseStatus.Name(stream.result.status)}: {stream.result.reason}"


def tool_outputs(events: list) -> list[Any]:
    return [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]


def _proc_bytes(pid: str, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def find_cli_pid(workspace: Path, env_entry: str, limit_s: float = 10.0) -> int:
    """The host pid of the CLI (``claude ... stream-json``) working in ``workspace``, or whose
    environment holds ``env_entry`` (however a sandbox shows its working directory)."""
    want = os.path.realpath(workspace)
    deadline = time.monotonic() + limit_s
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            argv = _proc_bytes(pid, "cmdline").split(b"\0")
            if os.path.basename(argv[0]) != b"claude" or b"stream-json" not in argv:
                continue
            with contextlib.suppress(OSError):
                if os.path.realpath(f"/proc/{pid}/cwd") == want:
                    return int(pid)
            if env_entry.encode() in _proc_bytes(pid, "environ").split(b"\0"):
                return int(pid)
        assert time.monotonic() < deadline, f"no CLI process runs in {workspace}"
        time.sleep(0.1)


def processes_with(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc")) if text.encode() in _proc_bytes(pid, "cmdline")]


def wait_gone(texts: list[str], limit_s: float) -> None:
    """Waits (bounded) until no process's command line contains any of ``texts``."""
    deadline = time.monotonic() + limit_s
    while any(processes_with(t) for t in texts) and time.monotonic() < deadline:
        time.sleep(0.1)


def process_state(pid: int) -> str | None:
    data = _proc_bytes(str(pid), "stat")
    return data.rsplit(b")", 1)[1].split()[0].decode() if data else None


def files_holding(root: Path, needle: str, *, suffixes: tuple[str, ...] = ()) -> list[Path]:
    """Regular files under ``root`` (ending in one of ``suffixes``, if given) that contain ``needle``."""
    found = []
    for dirpath, _, names in os.walk(root):  # unlike rglob, walk skips what vanishes as it goes (CLI temp files)
        for name in names:
            path = Path(dirpath) / name
            with contextlib.suppress(OSError):
                if (not path.is_symlink() and (not suffixes or name.endswith(suffixes)) and path.is_file()
                        and needle.encode() in path.read_bytes()):
                    found.append(path)
    return found


def _own(path: Path, user: str) -> None:
    if user == "nobody":
        for p in [path, *path.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)


def _git_repo(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "README.md").write_text("the attacker's project\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["init", "-q"], ["add", "README.md"],
                 ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "start"]):
        subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True, timeout=30)


# --------------------------------------------------------------------------------------------------
# The scenario
# --------------------------------------------------------------------------------------------------


class AttackScenario:
    """One run of the scenario (see the module docstring); ``run()`` returns the outcome, torn down."""

    def __init__(self, mode: str, user: str):
        self.mode = mode
        self.user = user
        self.s = {role: marker(role) for role in SECRET_ROLES}
        self.s["api_key"] = "sk-ant-api03-" + secrets.token_urlsafe(70) + "AA"
        self.outcome = AttackOutcome(user, mode, self.s)
        self.root = Path(tempfile.mkdtemp(prefix=f"helix-attacks-{mode}-{user}-"))
        self.home, self.data = self.root / "home", self.root / "data"
        self.workspaces = self.root / "workspaces"
        self.attacker_ws, self.victim_ws, self.cancel_ws, self.gated_ws, self.later_ws = (
            self.workspaces / n for n in ("attacker", "victim", "cancel", "gated", "later"))
        self.canary = self.victim_ws / "canary.txt"
        self.canary_text = f"the victim's canary {secrets.token_hex(4)}\n"
        self.tmp_file = Path("/tmp") / f"hx-attack-{secrets.token_hex(6)}"
        self.file_name = f"hx-written-{secrets.token_hex(4)}"
        self.package_file = f"hx-attack-{secrets.token_hex(6)}.pth"
        self.package_dirs = [str(Path(SERVER_SRC) / "helix_runner"), sysconfig.get_paths()["purelib"]]
        self.later_tags = {"other": secrets.token_hex(6), "same": secrets.token_hex(6)}
        self.servers: list[ServeProcess] = []
        self.held: list[tuple[Any, str, Stream]] = []
        self.listeners: dict[str, Listener] = {}
        self.channels: list[grpc.aio.Channel] = []
        self.api: ScriptedApi | None = None
        self.egress_ports: tuple[int, ...] = ()
        # The host beyond files (stage_host): a /dev/shm file, a SysV segment, a loop device, a terminal.
        self.shm_file = Path("/dev/shm") / f"hx-attack-{secrets.token_hex(6)}"
        self.sysv_id: int | None = None
        self.block_device: str | None = None
        self.terminal: tuple[int, int] | None = None  # (master, slave) fds of a pty standing in for a session
        self.terminal_name = ""

    # -- the model's script --------------------------------------------------------------------------

    def script(self) -> Script:
        """Every phase's turns, told apart by a tag in its prompt (each CLI plays the script anew)."""
        s = self.s

        def turns(tag: str, *replies: Reply) -> list[Reply]:
            match = RequestMatcher(first_user_contains=tag)
            return [Reply(content=r.content, match=match, label=tag) for r in replies]

        def bash(command: str) -> Reply:
            return Reply.tool_use("Bash", {"command": command, "timeout": 120000})

        battery = [bash(f"python3 .hx/attack_battery.py .hx/facts.json {group}") for group in BATTERY_GROUPS]
        look = f"cat {self.tmp_file}; echo; git config --global --get hx.mark; echo rc=$HXRC; echo later-ran"
        return Script([
            *turns("[[vhold]]", bash(f"echo {s['vtool']}"), bash(f"echo {HOLD}"), Reply.text("victim done")),
            *turns("[[vcancel]]", bash(f"echo {HOLD}"), Reply.text("second victim done")),
            *turns("[[vgate]]", bash(f"echo {HOLD} {s['gate']}"), Reply.text("third victim done")),
            *turns("[[attack]]", *battery, Reply.text("attacker done")),
            *turns("[[later-other]]", bash(look), Reply.text("later done")),
            *turns("[[later-same]]", bash("echo next-ran"), Reply.text("next done")),
            *turns("[[creds]]", Reply.text("creds done")),
        ])

    # -- set-up ----------------------------------------------------------------------------------------

    def lay_out(self) -> CertificateAuthority:
        """Directories and files; the data dir and the credentials are outside every workspace root."""
        s = self.s
        for d in (self.home / "tmp", self.victim_ws, self.cancel_ws, self.gated_ws, self.later_ws, self.root / "creds" / "ws"):
            d.mkdir(parents=True)
        _git_repo(self.attacker_ws)
        (self.victim_ws / "notes.txt").write_text(f"the victim's notes {s['vfile']}\n")
        (self.victim_ws / "secret.txt").write_text(f"the victim's secret {s['vsecret']}\n")
        (self.victim_ws / "secret.txt").chmod(0o600)
        self.canary.write_text(self.canary_text)
        pki = CertificateAuthority(self.root / "creds" / "secrets" / "pki")
        self.tls = pki.issue("server", dns=("localhost",), ips=("127.0.0.1",))
        self.token_file = self.root / "creds" / "secrets" / "token"
        self.token_file.write_text(s["token"] + "\n")
        self.token_file.chmod(0o600)
        self.s["tls_key"] = "sha256:" + hashlib.sha256(self.tls.key).hexdigest()[:16]  # how tls_key reports it
        _own(self.root, self.user)
        return pki

    async def start_servers(self, pki: CertificateAuthority) -> None:
        assert self.api is not None
        env = {"HOME": str(self.home), "PYTHONUNBUFFERED": "1", "ANTHROPIC_BASE_URL": self.api.base_url,
               "ANTHROPIC_API_KEY": self.s["api_key"], "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "CLAUDE_CODE_MAX_RETRIES": "2", "CLAUDE_CODE_TMPDIR": str(self.home / "tmp"),
               # nobody's Python finds this checkout through PYTHONPATH, and so must the key helper the
               # CLI runs with the child's environment (an image installs the package instead).
               "HELIX_RUNNER_INHERIT_ENV": ",".join((*DEFAULT_INHERIT_ENV, "PYTHONPATH"))}
        if SANDBOX_MODES[self.mode]:
            env["HELIX_RUNNER_SANDBOX_SKIP_LAYERS"] = ",".join(SANDBOX_MODES[self.mode])
        self.server = ServeProcess.start(self.user, self.root, self.root / "serve.log", env, "--web-port", "0",
                                         "--metrics-port", "0", workspace_root=self.workspaces)
        self.servers.append(self.server)
        creds_root = self.root / "creds"
        self.creds = ServeProcess.start(self.user, creds_root, self.root / "creds.log", env,
                                        "--auth-token-file", str(self.token_file), "--tls-cert-file",
                                        str(self.tls.cert_file), "--tls-key-file", str(self.tls.key_file),
                                        workspace_root=creds_root / "ws")
        self.servers.append(self.creds)
        await asyncio.to_thread(self.server.wait_serving)
        await asyncio.to_thread(self.creds.wait_serving)
        self.outcome.effects["containment"] = self.server.containment
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.server.port}")
        creds_channel = grpc.aio.secure_channel(f"localhost:{self.creds.port}", grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(root_certificates=pki.ca), grpc.access_token_call_credentials(self.s["token"])))
        self.channels += [channel, creds_channel]
        self.stub, self.creds_stub = pb_grpc.RunnerServiceStub(channel), pb_grpc.RunnerServiceStub(creds_channel)
        status = (await self.stub.GetServerStatus(pb.GetServerStatusRequest(), timeout=30)).status
        layers = {layer.name: layer.active for layer in status.sandbox.layers}
        assert layers == MODE_LAYERS[self.mode], (
            f"the server runs with the layers {layers}, not those of {self.mode}: "
            f"{[(layer.name, layer.detail) for layer in status.sandbox.layers]}")
        self.egress_ports = tuple(status.sandbox.egress_ports)

    async def start_victims(self) -> None:
        """The victims held at their breakpoint, and the hardened server's one finished job."""
        s = self.s
        hold = [res.Breakpoint(input_pattern=res.InputPatternCondition(regex=HOLD, tool_name="Bash"))]
        mcp = {"mcpServers": {"victim-tools": {"type": "http", "url": "http://127.0.0.1:9/mcp",
                                               "headers": {"Authorization": f"Bearer {s['vmcp']}"}}}}
        self.victim = run_phase(self.stub, job_id=VICTIM_JOB, project_id=s["vproj"], workdir=self.victim_ws,
                                prompt=f"[[vhold]] the victim's task {s['vprompt']}", allowed_tools=["Bash"],
                                breakpoints=hold, env={"HELIX_VSECRET": s["venv"]}, mcp_config=json.dumps(mcp),
                                append_system_prompt=f"the victim's own instructions {s['vsys']}")
        self.cancel_target = run_phase(self.stub, job_id=CANCEL_JOB, project_id="cancel-proj", workdir=self.cancel_ws,
                                       prompt="[[vcancel]] another tenant's task", allowed_tools=["Bash"],
                                       breakpoints=hold)
        self.gated = run_phase(self.stub, job_id=GATED_JOB, project_id="gated-proj", workdir=self.gated_ws,
                               prompt="[[vgate]] a task whose every command needs approval", allowed_tools=["Bash"],
                               breakpoints=hold, env={"HELIX_GATED": s["gate"]})
        self.held += [(self.stub, VICTIM_JOB, self.victim), (self.stub, CANCEL_JOB, self.cancel_target),
                      (self.stub, GATED_JOB, self.gated)]
        creds_phase = run_phase(self.creds_stub, job_id="creds-job", project_id=s["tproj"],
                                workdir=self.root / "creds" / "ws", prompt="[[creds]] hello")
        await self.victim.wait_for(breakpoint_hit)
        await self.cancel_target.wait_for(breakpoint_hit)
        await self.gated.wait_for(breakpoint_hit)
        await creds_phase.finish(90)
        assert creds_phase.result is not None and creds_phase.result.status == res.PHASE_STATUS_SUCCEEDED, (
            ended(creds_phase))
        self.victim_pid = await asyncio.to_thread(find_cli_pid, self.victim_ws, f"HELIX_VSECRET={s['venv']}")
        self.gated_pid = await asyncio.to_thread(find_cli_pid, self.gated_ws, f"HELIX_GATED={s['gate']}")

    def start_listeners(self, link_local: str | None) -> None:
        sockets = self.root / "services"  # where no phase may look: an internal service's socket directory
        sockets.mkdir()
        self.listeners = {"tcp": Listener("tcp"), "udp": Listener("udp"),
                          "abstract": Listener("abstract", name=f"hx-attack-{secrets.token_hex(6)}"),
                          "unix_path": Listener("unix", name=str(sockets / "internal.sock"))}
        _own(sockets, self.user)
        other_ip = other_host_address()
        if other_ip:
            self.listeners["other_host"] = Listener("tcp", host=other_ip)
            try:  # the gateway's port number, on another address (the gateway listens on 127.0.0.1 only)
                self.listeners["other_host_egress"] = Listener("tcp", host=other_ip, port=self.egress_ports[0])
            except (OSError, IndexError) as exc:
                self.outcome.unavailable["tcp_other_host_egress_port"] = (
                    f"no listener on {other_ip} at an egress port {self.egress_ports}: {exc!r}")
        else:
            self.outcome.unavailable["tcp_other_host"] = "this machine has no non-loopback IPv4 address"
            self.outcome.unavailable["tcp_other_host_egress_port"] = self.outcome.unavailable["tcp_other_host"]
        try:  # the address may be taken off lo by someone else in between: then there is nothing to attack
            if link_local is None:
                raise OSError("it cannot be placed on lo")
            self.listeners["link_local"] = Listener("tcp", host=link_local)
        except OSError as exc:
            self.outcome.unavailable["tcp_link_local"] = f"no listener on {LINK_LOCAL} here (needs root and ip): {exc}"

    def stage_host(self) -> None:
        """What other processes of the server's user hold beyond files: POSIX and SysV shared memory,
        a terminal; and, as root, a raw block device (a disk with another tenant's data)."""
        s, unavailable = self.s, self.outcome.unavailable
        self.shm_file.write_text(f"another process's shared memory {s['shm']}\n")
        self.shm_file.chmod(0o600)
        _own(self.shm_file, self.user)
        try:
            self.sysv_id = sysv_segment(f"another process's SysV segment {s['sysv']}", self.user)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            unavailable["sysv_shm"] = f"no SysV shared memory segment could be made here: {exc!r}"
        master, slave = os.openpty()
        self.terminal, self.terminal_name = (master, slave), os.ttyname(slave)
        os.set_blocking(master, False)
        if self.user == "nobody":
            os.chown(self.terminal_name, NOBODY, -1)
        if self.user != "root":
            unavailable["block_device"] = "a block device is root's; nobody cannot open one with or without a sandbox"
        elif not shutil.which("losetup"):
            unavailable["block_device"] = "no losetup (util-linux) to stage a block device"
        else:
            image = self.root / "disk.img"
            image.write_bytes(f"a raw disk's data {s['blockdev']}\n".encode().ljust(64 << 10, b"\0"))
            try:
                self.block_device = loop_device(image)
            except (OSError, subprocess.SubprocessError) as exc:
                unavailable["block_device"] = f"no loop device here: {exc!r}"

    def unstage_host(self) -> None:
        if self.sysv_id is not None:
            remove_sysv_segment(self.sysv_id)
        if self.block_device:
            subprocess.run(["losetup", "--detach", self.block_device], capture_output=True, timeout=30)
        if self.terminal is not None:
            for fd in self.terminal:
                os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            self.shm_file.unlink()

    def terminal_output(self) -> bytes:
        """What was written to the staged terminal since the last call (read at its master)."""
        out = b""
        assert self.terminal is not None
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.terminal[0], 4096):
                out += chunk
        return out

    def facts(self) -> dict[str, Any]:
        """What the attacker knows or finds out (see attack_battery); never a secret the tests check."""
        s, problems = self.s, self.outcome.setup_problems
        recording = self.data / "recordings" / VICTIM_JOB
        if not recording.is_dir():
            problems["recordings"] = f"the victim has no recording directory at {recording}"
        transcripts = files_holding(self.root, s["vprompt"], suffixes=(".jsonl",))
        transcripts = [p for p in transcripts if not p.is_relative_to(self.data / "recordings")]
        if not transcripts:
            problems["session_transcript"] = f"no session transcript of the victim's CLI under {self.root}"
        option_files = [p for p in files_holding(self.root, s["vmcp"])
                        if not p.name.endswith((".jsonl", ".sqlite3", ".sqlite3-wal"))]
        if not option_files:
            problems["phase_option_files"] = f"no file under {self.root} holds the victim's MCP credential"

        def hexed(message) -> str:
            return message.SerializeToString().hex()

        return {
            "workspace": str(self.attacker_ws), "job_id": ATTACKER_JOB, "data_dir": str(self.data),
            "database": str(self.data / "helix-runner.sqlite3"), "workspace_root": str(self.workspaces),
            "server": {"pid": self.server.proc.pid, "grpc_port": self.server.port, "web_port": self.server.web_port,
                       "metrics_port": self.server.metrics_port, "home": str(self.home)},
            "creds_server": {"pid": self.creds.proc.pid, "grpc_port": self.creds.port},
            "victim": {"job_id": VICTIM_JOB, "cli_pid": self.victim_pid, "workspace": str(self.victim_ws),
                       "file": str(self.victim_ws / "notes.txt"), "secret_file": str(self.victim_ws / "secret.txt"),
                       "transcript": str(transcripts[0]) if transcripts else "", "recording_dir": str(recording),
                       "option_files": [str(p) for p in option_files], "canary": str(self.canary)},
            "grpc": {
                "list_jobs": hexed(pb.ListJobsRequest()),
                "get_job": hexed(pb.GetJobRequest(job_id=VICTIM_JOB)),
                "watch_phase": hexed(pb.WatchPhaseRequest(job_id=VICTIM_JOB, phase_id="p")),
                "inject": hexed(pb.InjectMessageRequest(job_id=VICTIM_JOB, phase_id="p", text=s["inject"])),
                "cancel": hexed(pb.CancelPhaseRequest(job_id=CANCEL_JOB, phase_id="p", reason="attacker")),
            },
            "gated": {"cli_pid": self.gated_pid, "recording_dir": str(self.data / "recordings" / GATED_JOB),
                      "held_text": s["gate"]},
            "connect": {"ListJobs": {}, "GetJob": {"jobId": VICTIM_JOB}},
            "listeners": {name: self.listeners[name].address if name in self.listeners else None
                          for name in ("tcp", "udp", "abstract", "link_local", "other_host", "unix_path",
                                       "other_host_egress")},
            "payloads": {"tcp": s["tcp"], "link_local": s["linklocal"], "other_host": s["otherhost"], "udp": s["udp"],
                         "abstract": s["abstract"], "outlive": s["outlive"], "cgroup_escape": s["cgescape"],
                         "write": s["write"], "tamper": s["tamper"], "tmp": s["tmp"], "gitconfig": s["gitcfg"],
                         "rc": s["rc"], "unix_path": s["unixpath"], "other_host_egress": s["otheregress"],
                         "terminal": s["tty"]},
            "names": {"file": self.file_name, "package_file": self.package_file, "tmp_file": str(self.tmp_file),
                      "shm_file": str(self.shm_file), "block_device": self.block_device,
                      "terminal": self.terminal_name},
            "package_dirs": self.package_dirs,
        }

    # -- the attack and what it did --------------------------------------------------------------------

    async def attack(self) -> None:
        hx = self.attacker_ws / ".hx"
        hx.mkdir()
        shutil.copyfile(attack_battery.__file__, hx / "attack_battery.py")
        (hx / "facts.json").write_text(json.dumps(self.facts(), indent=1))
        _own(hx, self.user)
        options: dict[str, Any] = {"allowed_tools": ["Bash"]}
        if self.server.containment.startswith("cgroup"):
            options["memory_limit_bytes"] = 4 << 30  # a limit for the cgroup_limit probe to try to raise
        attacker = run_phase(self.stub, job_id=ATTACKER_JOB, project_id=ATTACKER_PROJECT, workdir=self.attacker_ws,
                             prompt="[[attack]] have a look around", **options)
        events, _ = await attacker.finish(240)
        self.attacker_result = attacker.result
        self.outcome.effects["attacker_result"] = ended(attacker)
        self.outcome.effects["battery_output"] = [
            ("error: " if f.is_error else "") + f.content_preview[:300] for f in tool_outputs(events)]
        for finished in tool_outputs(events):
            assert not finished.content_truncated, "a probe group's output must fit the tool result's preview"
            for line in finished.content_preview.splitlines():
                with contextlib.suppress(ValueError):
                    report = json.loads(line)
                    if isinstance(report, dict) and "probe" in report:
                        self.outcome.probes[report["probe"]] = report

    async def observe(self) -> None:
        """Effects seen from outside once the attacker's phase has ended."""
        s, fx, problems = self.s, self.outcome.effects, self.outcome.setup_problems
        if not alive(self.victim_pid) or self.victim.result is not None:
            for name in VICTIM_PROBES:
                problems[name] = f"the victim's CLI was gone by the end of the attack ({ended(self.victim)})"
        if self.gated.result is None and not alive(self.gated_pid):
            problems["forge_approval"] = f"the gated phase's CLI was gone before the attack ended ({ended(self.gated)})"

        async def grace(wait) -> None:  # an effect may show a little late; refused ones wait it out
            with contextlib.suppress(TimeoutError, AssertionError):
                await wait

        await asyncio.gather(  # at once: each waits its whole grace when the attack was refused
            grace(self.victim.wait_for(lambda e: s["inject"] in str(e), limit=3)),
            grace(self.gated.wait_for(lambda e: e.HasField("tool_call_finished"), limit=3)),  # released: runs at once
            grace(self.cancel_target.finish(5)))
        fx["victim_injected"] = any(s["inject"] in str(e) for e in self.victim.events)
        fx["victim_state"] = process_state(self.victim_pid)
        fx["held_call_ran"] = [e.tool_call_finished.content_preview for e in self.gated.events
                               if e.HasField("tool_call_finished")]
        fx["victim_cancelled"] = ended(self.cancel_target) if self.cancel_target.result is not None else ""
        for name, listener in self.listeners.items():
            payload = {"tcp": "tcp", "udp": "udp", "abstract": "abstract", "other_host": "otherhost",
                       "link_local": "linklocal", "unix_path": "unixpath", "other_host_egress": "otheregress"}[name]
            fx[f"reached_{name}"] = listener.saw(s[payload])
            if not listener.reachable():
                problems[{"tcp": "tcp_internal_service", "udp": "udp_dns", "abstract": "abstract_unix_socket",
                          "unix_path": "unix_socket_path", "other_host_egress": "tcp_other_host_egress_port"}.get(
                    name, f"tcp_{name}")] = f"the test itself could not reach its {name} listener"
        fx["terminal_output"] = self.terminal_output()
        control = f"control-{secrets.token_hex(4)}".encode()
        assert self.terminal is not None
        os.write(self.terminal[1], control)
        if control not in self.terminal_output():
            problems["other_terminal"] = "the test itself could not write to its terminal"
        daemons = {"outlive_phase": s["outlive"], "cgroup_escape": s["cgescape"]}
        # The phase's processes are ended before its result is sent; a grace for the kernel to reap them.
        await asyncio.to_thread(wait_gone, list(daemons.values()), 3.0)
        fx["alive"] = {name: processes_with(text) for name, text in daemons.items()}
        fx["written"] = {
            "write_server_home": [str(p) for p in [self.home / self.file_name] if p.exists()],
            "write_other_workspace": [str(p) for p in [self.victim_ws / self.file_name] if p.exists()],
            "write_workspace_root": [str(p) for p in [self.workspaces / self.file_name] if p.exists()],
            "write_data_dir": [str(p) for p in (self.data / self.file_name, self.data / "recordings" / self.file_name)
                               if p.exists()],
            "write_server_package": [d for d in self.package_dirs if (Path(d) / self.package_file).exists()],
        }
        fx["canary_changed"] = self.canary.read_text(errors="replace") != self.canary_text
        with contextlib.closing(sqlite3.connect(f"file:{self.data / 'helix-runner.sqlite3'}?mode=ro", uri=True)) as db:
            prompts = [row[0] for row in db.execute("SELECT prompt FROM phases WHERE job_id = ?", (VICTIM_JOB,))]
        fx["victim_prompt_in_db"] = prompts
        artifacts = self.attacker_result.artifacts if self.attacker_result is not None else None
        text = artifacts.diff if artifacts is not None else ""
        with contextlib.suppress(grpc.aio.AioRpcError):
            page = await self.stub.GetPhaseDiff(pb.GetPhaseDiffRequest(job_id=ATTACKER_JOB, phase_id="p"), timeout=10)
            text += page.chunk.decode(errors="replace")
        fx["artifact_evidence"] = attack_battery.evidence(text.encode())
        if not artifacts or not artifacts.git_available:
            problems["workspace_symlinks"] = "the attacker's phase has no artifacts (its diff) to leak into"

    async def later_phases(self) -> None:
        """Phases started after the attack, which must not run anything the attacker left behind."""
        fx, problems = self.outcome.effects, self.outcome.setup_problems
        other = run_phase(self.stub, job_id="later-job", project_id="later-proj", workdir=self.later_ws,
                          prompt="[[later-other]] an unrelated task", allowed_tools=["Bash"],
                          env={"HELIX_LATER": self.later_tags["other"]})
        same = run_phase(self.stub, job_id="next-job", project_id=ATTACKER_PROJECT, workdir=self.attacker_ws,
                         prompt="[[later-same]] the project's next task", allowed_tools=["Bash"],
                         env={"HELIX_LATER": self.later_tags["same"]})
        await other.finish(150)
        await same.finish(150)
        fx["later_results"] = [ended(other), ended(same)]
        fx["later_output"] = "\n".join(f.content_preview for f in tool_outputs(other.events))
        if "later-ran" not in fx["later_output"]:
            for name in ("write_tmp", "shell_persistence", "plant_user_hooks"):
                problems[name] = f"the later phase did not run its command ({ended(other)})"
        if "next-ran" not in "\n".join(f.content_preview for f in tool_outputs(same.events)):
            problems["plant_workspace_hooks"] = f"the project's next phase did not run its command ({ended(same)})"
        tags = self.later_tags
        fx["hooks_run"] = {
            "user config, in another project's phase": (self.later_ws / f"hx-hook-user-{tags['other']}").exists(),
            "user config, in the project's next phase": (self.attacker_ws / f"hx-hook-user-{tags['same']}").exists(),
            "workspace settings, in the project's next phase": (
                self.attacker_ws / f"hx-hook-ws-{tags['same']}").exists(),
        }
        loot = self.attacker_ws / "hx-mcp-loot.txt"
        fx["mcp_loot"] = attack_battery.evidence(loot.read_bytes()) if loot.exists() else []

    # -- all of it -------------------------------------------------------------------------------------

    async def run(self, link_local: str | None) -> AttackOutcome:
        """The scenario; ``link_local``: 169.254.169.254 where it is placed on ``lo``, else None."""
        timings = self.outcome.effects.setdefault("seconds", {})
        start = time.monotonic()

        def took(step: str) -> None:
            timings[step] = round(time.monotonic() - start - sum(timings.values()), 1)

        try:
            self.api = ScriptedApi(self.script()).start()
            pki = self.lay_out()
            await self.start_servers(pki)
            took("servers")
            await self.start_victims()
            self.start_listeners(link_local)
            self.stage_host()
            took("victims")
            await self.attack()
            took("attack")
            await self.observe()
            took("observe")
            await self.later_phases()
            took("later")
            return self.outcome
        finally:
            await self.tear_down()
            took("tear_down")

    async def tear_down(self) -> None:
        for stub, job_id, stream in self.held:
            if stream.result is None and stream.error is None:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await stub.CancelPhase(pb.CancelPhaseRequest(job_id=job_id, phase_id="p"), timeout=10)
                with contextlib.suppress(Exception):
                    await stream.finish(30)
        for channel in self.channels:
            await channel.close()
        for server in self.servers:
            await asyncio.to_thread(server.stop)
            self.outcome.effects.setdefault("logs", {})[server.log.name] = server.log.read_text()[-6000:]
        for text in (self.s["outlive"], self.s["cgescape"]):
            for pid in processes_with(text):  # only what this scenario's attacker started
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for listener in self.listeners.values():
            listener.stop()
        await asyncio.to_thread(self.unstage_host)
        if self.api is not None:
            self.api.stop()
        for path in [self.tmp_file, *(Path(d) / self.package_file for d in self.package_dirs)]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        shutil.rmtree(self.root, ignore_errors=True)


async def run_attack_scenario(mode: str, user: str, link_local: str | None) -> AttackOutcome:
    """The whole scenario in sandbox ``mode`` (``SANDBOX_MODES``) with the server as ``user`` (``root``
    or ``nobody``); skips where it cannot run."""
    if user == "nobody" and nobody_python() is None:
        pytest.skip("needs root, setpriv and a Python that nobody can run")
    if os.geteuid() != 0:
        pytest.skip("stages root-owned servers and a link-local address: needs root")
    return await AttackScenario(mode, user).run(link_local)


# Scenarios run at once: each spends most of its time waiting on its CLIs and on graces for effects
# that (refused) never come; more at once would only queue for the CPU.
AT_ONCE = 2


async def run_attack_scenarios(scenarios: list[tuple[str, str]]) -> dict[tuple[str, str], AttackOutcome | BaseException]:
    """Each ``(mode, user)`` scenario, ``AT_ONCE`` at a time, sharing one link-local address; the
    outcome of each, or what it raised (a skip included)."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(mode: str, user: str, link_local: str | None) -> AttackOutcome:
        async with gate:
            return await run_attack_scenario(mode, user, link_local)

    with link_local_address() as link_local:
        results = await asyncio.gather(*(one(mode, user, link_local) for mode, user in scenarios),
                                       return_exceptions=True)
    return dict(zip(scenarios, results, strict=True))

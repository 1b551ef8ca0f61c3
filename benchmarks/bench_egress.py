"""The egress proxy's cost per request, and what TLS termination adds to a handshake.

Side by side in one run, interleaved sample by sample (ratios and differences hold on a noisy
machine, absolute figures do not):

* **pass-through, per request**: a client opens a tunnel (``CONNECT``) and sends one small HTTP/1.1
  request over it, as ``curl`` or ``pip`` do for a fresh connection; the time from connect to the
  answer's last byte, through the proxy of this tree, through the proxy of an earlier checkout
  (``--before``), and direct (no proxy). The proxy's cost is its p50 minus direct's.
* **pass-through, keep-alive**: the same request repeated over one open tunnel (the proxy only relays).
* **handshake**: ``CONNECT`` + a TLS handshake + one request to an HTTPS upstream, for a host that is
  tunnelled (no secret, no rule: the phase's own TLS reaches the upstream) and for one the proxy
  terminates (a vault secret bound to it; the leaf already minted and cached). The difference is what
  termination adds: the proxy's own handshake upstream, and the one with the tool.

Each proxy runs in its own process (one asyncio loop, as in the server); the upstreams run in
another. Usage: .venv/bin/python benchmarks/bench_egress.py [--samples N] [--before REF] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

REQUEST = b"GET /ping HTTP/1.1\r\nhost: upstream\r\n\r\n"
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\npong"

PROXY = r'''
import asyncio, inspect, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
cfg = json.loads(sys.argv[2])
from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.egress.allowlist import EgressPolicy
from helix_runner.egress.capabilities import Capabilities, Grant
from helix_runner.egress.proxy import EgressProxy, ProxySettings

class Sink:
    def __getattr__(self, name):
        return lambda *a, **k: None

async def main():
    caps = Capabilities()
    kwargs, grant_kwargs = {}, {}
    if cfg.get("terminate"):
        from helix_runner.domain.egress_secrets import validate
        from helix_runner.egress.authority import CertificateAuthority
        from helix_runner.egress.interception import Interceptor
        from helix_runner.egress.vault import PhaseCredentials, Vault
        authority = CertificateAuthority(Path(cfg["ca_dir"])).load_or_create()
        kwargs["interceptor"] = Interceptor(authority, Path(cfg["upstream_ca"]))
        vault = Vault(b"k" * 32)
        sealed = vault.seal(validate("p", "TOKEN", [cfg["terminate"]], "bearer"), b"secret-value")
        grant_kwargs["credentials"] = PhaseCredentials(vault, (sealed,))
    policy = EgressPolicy(exceptions=OperatorExceptions.parse(cfg["allow"]))
    cap = caps.issue(Grant(job_id="j", phase_id="p", project="p", sink=Sink(), egress=policy, **grant_kwargs))
    proxy = await EgressProxy(ProxySettings(), caps, **kwargs).start()
    print(json.dumps({"port": proxy.port, "cap": cap}), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''

UPSTREAMS = r'''
import asyncio, json, ssl, sys
cert, key = sys.argv[1], sys.argv[2]
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\npong"

async def serve(reader, writer):
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()

async def main():
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    plain = await asyncio.start_server(serve, "127.0.0.1", 0)
    tls_a = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
    tls_b = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
    print(json.dumps({"plain": plain.sockets[0].getsockname()[1], "tunnelled": tls_a.sockets[0].getsockname()[1],
                      "terminated": tls_b.sockets[0].getsockname()[1]}), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
'''


def start(code: str, *args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([str(PYTHON), "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def export(ref: str, into: Path) -> Path:
    """The ``server/`` of git ``ref``, exported under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", ref, "server"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "server"


async def connect(proxy: dict | None, target: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if proxy is None:
        host, port = target.rsplit(":", 1)
        return await asyncio.open_connection(host, int(port))
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy["port"])
    auth = base64.b64encode(b"phase:" + proxy["cap"].encode())
    writer.write(b"CONNECT %s HTTP/1.1\r\nproxy-authorization: Basic %s\r\n\r\n" % (target.encode(), auth))
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


async def one_request(reader, writer) -> None:
    writer.write(REQUEST)
    await reader.readexactly(len(ANSWER))


async def fresh(proxy: dict | None, target: str, tls: ssl.SSLContext | None = None) -> float:
    t0 = time.perf_counter()
    reader, writer = await connect(proxy, target)
    if tls is not None:
        await writer.start_tls(tls, server_hostname="127.0.0.1")
    await one_request(reader, writer)
    elapsed = time.perf_counter() - t0
    writer.close()
    return elapsed


def summary(values: list[float]) -> dict:
    ms = sorted(v * 1000 for v in values)
    return {"p50": statistics.median(ms), "p90": ms[int(len(ms) * 0.9)], "n": len(ms)}


async def bench(samples: int, before: Path | None, work: Path) -> dict:
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from support.certs import CertificateAuthority as TestCA

    internal = TestCA(work / "internal", "bench CA")
    leaf = internal.issue("upstream", ips=("127.0.0.1",), client=False)
    up_proc, ups = start(UPSTREAMS, str(leaf.cert_file), str(leaf.key_file))
    procs = [up_proc]
    targets = {k: f"127.0.0.1:{v}" for k, v in ups.items()}
    cfg = {"allow": list(targets.values()), "terminate": targets["terminated"], "ca_dir": str(work / "egress"),
           "upstream_ca": str(internal.ca_file)}
    sides = {}
    try:
        p, sides["this tree"] = start(PROXY, str(REPO_ROOT / "server"), json.dumps(cfg))
        procs.append(p)
        if before is not None:
            p, sides["before"] = start(PROXY, str(before), json.dumps({**cfg, "terminate": ""}))
            procs.append(p)
        trusting = ssl.create_default_context(cafile=str(work / "egress" / "trust" / "bundle.pem"))
        trusting.load_verify_locations(cafile=str(internal.ca_file))
        results: dict[str, list[float]] = {}

        def add(name: str, value: float) -> None:
            results.setdefault(name, []).append(value)

        for _ in range(20):  # warm up: imports, the leaf minted and cached
            for proxy in sides.values():
                await fresh(proxy, targets["plain"])
            await fresh(sides["this tree"], targets["terminated"], trusting)
        for _ in range(samples):
            add("direct: connect + 1 request", await fresh(None, targets["plain"]))
            for name, proxy in sides.items():
                add(f"{name}: CONNECT + 1 request", await fresh(proxy, targets["plain"]))
            add("this tree: tunnelled TLS (no secret) + 1 request", await fresh(sides["this tree"], targets["tunnelled"],
                                                                               trusting))
            add("this tree: terminated TLS (secret, cached leaf) + 1 request",
                await fresh(sides["this tree"], targets["terminated"], trusting))
        # Keep-alive: one tunnel, many requests.
        for name, proxy in [("direct", None), *sides.items()]:
            reader, writer = await connect(proxy, targets["plain"])
            for _ in range(samples):
                t0 = time.perf_counter()
                await one_request(reader, writer)
                add(f"{name}: request over an open tunnel", time.perf_counter() - t0)
            writer.close()
        return {name: summary(v) for name, v in results.items()}
    finally:
        for p in procs:
            p.terminate()
            p.wait(5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--before", help="a git ref whose proxy runs beside this tree's (its server/ exported)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp:
        work = Path(tmp)
        before = export(args.before, work / "before") if args.before else None
        out = asyncio.run(bench(args.samples, before, work))
    print(f"load {os.getloadavg()[0]:.1f}; {args.samples} samples each, interleaved")
    print(f"{'':66} {'p50 ms':>8} {'p90 ms':>8}")
    for name, s in out.items():
        print(f"{name:66} {s['p50']:8.3f} {s['p90']:8.3f}")
    base = out["direct: connect + 1 request"]["p50"]
    for side in ("this tree", "before"):
        key = f"{side}: CONNECT + 1 request"
        if key in out:
            print(f"proxy adds per request ({side}): {out[key]['p50'] - base:.3f} ms p50")
    term = out["this tree: terminated TLS (secret, cached leaf) + 1 request"]["p50"]
    tun = out["this tree: tunnelled TLS (no secret) + 1 request"]["p50"]
    print(f"termination adds to a TLS connection (cached leaf): {term - tun:.3f} ms p50")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

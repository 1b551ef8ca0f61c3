"""Authorization benchmark: what the per-call principal lookup and permission check cost (issue 32).

What it measures, in-process and without gRPC (the check's own cost, so a noisy machine's network
stack does not drown it): for a GetJob request, ``CallAccess.principal`` (the credential to a
principal) plus ``Authorization.check`` (the role on the job's project), per call, in µs. Side by
side in one run:

* "open": no credentials configured (a loopback server: every caller is admin), the floor;
* "old token": the single ``auth_token_file`` token (admin everywhere);
* "named token": a principal from the principals file with a grant on one project;
* "jwt (cached)": an RS256 bearer JWT, after its first check (the principal is cached by the
  token's digest until it expires);
* "jwt (first)": the same JWT's first check (signature verification), each call a new token.

The job's project comes from a stub store read the first time a job is seen, then from the cache.
The table prints p50 / p90 in µs over ``--calls`` calls and the ratio to "open". The issue's target:
the check adds ≤ 50 µs p50 per call (compare "named token" and "jwt (cached)" with "open"; the
end-to-end figure is ``bench_read_model.py --baseline REF``'s ListJobs/GetJob side by side).

Usage: .venv/bin/python benchmarks/bench_authorization.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.authorization import Authorization
from helix_runner.api.call_access import CallAccess
from helix_runner.api.principals import Authenticator, load_principals_file
from helix_runner.api.routing import PERMISSIONS

TOKEN = "the-old-single-token-0123456789"
NAMED = "named-token-of-team-a-0123456789"


class Context:
    def __init__(self, authorization: str | None):
        self._metadata = (("authorization", authorization),) if authorization else ()

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self):
        return {}


def setup(tmp: Path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]}))
    (tmp / "principals.toml").write_text(f"""
[[token]]
name = "bench@team-a"
sha256 = "{hashlib.sha256(NAMED.encode()).hexdigest()}"
grants = {{ team-a = ["operator"] }}

[jwt]
jwks = "{tmp / 'jwks.json'}"
issuer = "https://id.bench"
audience = "helix-runner"
""")

    def token(n: int = 0) -> str:
        now = int(time.time())
        return jwt.encode({"iss": "https://id.bench", "aud": "helix-runner", "sub": f"jwt-{n}", "exp": now + 3600,
                           "helix_grants": {"team-a": ["viewer"]}}, key, algorithm="RS256", headers={"kid": "k1"})

    return load_principals_file(tmp / "principals.toml"), token


def measure(access: CallAccess, contexts, calls: int) -> list[float]:
    need = PERMISSIONS["GetJob"]
    request = pb.GetJobRequest(job_id="job-1")
    times = []
    for i in range(calls):
        context = contexts(i)
        start = time.perf_counter_ns()
        principal = access.principal(context)
        access.authorization.check(need, request, principal)
        times.append((time.perf_counter_ns() - start) / 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        principals, token = setup(Path(tmp))
        authorization = Authorization(lambda job_id: "team-a", lambda _: None)
        full = CallAccess(Authenticator(TOKEN, principals), authorization)
        cached_jwt = f"Bearer {token()}"
        fresh = [f"Bearer {token(n)}" for n in range(min(args.calls, 500))]
        rows = [
            ("open", CallAccess(Authenticator(None), authorization), lambda i: Context(None), args.calls),
            ("old token", full, lambda i: Context(f"Bearer {TOKEN}"), args.calls),
            ("named token", full, lambda i: Context(f"Bearer {NAMED}"), args.calls),
            ("jwt (cached)", full, lambda i: Context(cached_jwt), args.calls),
            ("jwt (first)", full, lambda i: Context(fresh[i]), len(fresh)),
        ]
        results = []
        for name, access, contexts, calls in rows:
            measure(access, contexts, min(calls, 200))  # warm up (imports, caches)
            if name == "jwt (first)":
                access.authenticator._cache.clear()
            times = measure(access, contexts, calls)
            results.append((name, statistics.median(times), statistics.quantiles(times, n=10)[8], calls))
    floor = results[0][1]
    print(f"{'credential':<14} {'calls':>7} {'p50 µs':>8} {'p90 µs':>8} {'p50 / open':>11} {'added p50 µs':>13}")
    for name, p50, p90, calls in results:
        print(f"{name:<14} {calls:>7} {p50:>8.1f} {p90:>8.1f} {p50 / floor:>10.1f}x {p50 - floor:>13.1f}")


if __name__ == "__main__":
    main()

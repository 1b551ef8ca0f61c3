"""The service's own API, reached from inside a phase: loopback is not a boundary for a phase.

A phase runs as the server's user on the server's host, so the gRPC port (no token on loopback by
default), the dashboard's Connect API and ``/metrics`` are one connection away; and a hardened
server's token and TLS key sit in files whose paths its command line shows.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]

# probe -> the secret whose return proves the read (never handed to the attacker)
READS = {
    "grpc_list_jobs": "vproj",  # ListJobs names another project's job
    "grpc_get_job": "vprompt",  # GetJob returns another phase's prompt
    "grpc_watch_phase": "vtool",  # WatchPhase replays another phase's events (a tool's output)
    "connect_list_jobs": "vproj",  # the same through the dashboard's Connect API (HTTP JSON)
    "connect_get_job": "vprompt",
    "metrics": "vproj",  # /metrics labels name other projects
    "token_file": "token",  # the hardened server's --auth-token-file, path from its command line
    "tls_key": "tls_key",  # its --tls-key-file (reported as a digest)
    "stolen_token_call": "tproj",  # ListJobs over TLS with the stolen token: its jobs come back
}


@pytest.mark.parametrize("probe", READS)
def test_a_phase_cannot_read_through_the_service(attacked, probe):
    assert attacked.secrets[READS[probe]] not in attacked.found(probe), attacked.describe(probe)


def test_a_phase_cannot_inject_into_another_job_s_phase(attacked):
    """InjectMessage on the victim's phase: the message must not show in the victim's stream."""
    attacked.probe("inject_message")
    assert not attacked.effects["victim_injected"], attacked.describe("inject_message")


def test_a_phase_cannot_cancel_another_job_s_phase(attacked):
    """CancelPhase on another job's held phase: it must still be running after the attack."""
    attacked.probe("cancel_phase")
    assert not attacked.effects["victim_cancelled"], (attacked.effects["victim_cancelled"],
                                                      attacked.describe("cancel_phase"))

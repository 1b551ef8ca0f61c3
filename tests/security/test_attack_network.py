"""The network from inside a phase: whatever the server's host can reach, a phase can.

The endpoints are the test's own (listeners that record what reaches them); the service's own
ports are attacked in ``test_attack_service_api.py``. Each listener is checked to be reachable by
the test itself afterwards, so a refusal is the phase's, not the setup's.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.real_cli, pytest.mark.slow, pytest.mark.timeout(600)]

# probe -> the listener it tries to reach
REACH = {
    "tcp_internal_service": "tcp",  # TCP on 127.0.0.1, standing in for an internal service
    "tcp_link_local": "link_local",  # TCP to 169.254.169.254, a cloud metadata endpoint
    "tcp_other_host": "other_host",  # TCP to this host's own non-loopback address: another host
    "udp_dns": "udp",  # a DNS query to a UDP listener on loopback
    "abstract_unix_socket": "abstract",  # an abstract unix socket (no file to protect it)
    "unix_socket_path": "unix_path",  # a pathname unix socket in a directory the phase may not see
    # TCP to another host on the port number of the phase's gateway (allowed on 127.0.0.1)
    "tcp_other_host_egress_port": "other_host_egress",
}


@pytest.mark.parametrize("probe", REACH)
def test_a_phase_reaches_no_endpoint_of_the_host(attacked, probe):
    attacked.probe(probe)
    assert not attacked.effects[f"reached_{REACH[probe]}"], attacked.describe(probe)


def test_a_phase_cannot_use_raw_sockets(attacked):
    """A raw ICMP socket: the kernel answered its echo request (regression as nobody: no CAP_NET_RAW)."""
    assert "echo-reply" not in attacked.found("raw_socket"), attacked.describe("raw_socket")


def test_a_phase_reaches_its_own_loopback_server(attacked):
    """Legitimate work, kept beside the attacks so that a mode which breaks it says so: a server the
    phase starts on 127.0.0.1 (a test suite's, a dev server's), reached from the same phase."""
    assert "reached" in attacked.found("own_loopback_server"), attacked.describe("own_loopback_server")

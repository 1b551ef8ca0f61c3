"""Capabilities: issued, bound, revoked; how a request presents one."""

from __future__ import annotations

import base64

from helix_runner.egress.capabilities import (
    PREFIX,
    Capabilities,
    Grant,
    ModelAllowlist,
    presented_api_capability,
    presented_proxy_capability,
)


class NullSink:
    def on_response(self, model, status, usage):
        pass

    def on_event(self, event):
        pass

    def on_egress_connection(self, destination):
        pass


def grant(phase: str = "p1") -> Grant:
    return Grant(job_id="j", phase_id=phase, project="proj", sink=NullSink())


def test_a_capability_authenticates_its_grant_until_revoked() -> None:
    table = Capabilities()
    mine, theirs = grant("p1"), grant("p2")
    token = table.issue(mine)
    other = table.issue(theirs)
    assert token.startswith(PREFIX) and token != other
    assert table.grant(token) is mine and table.grant(other) is theirs
    table.revoke(token)
    assert table.grant(token) is None
    assert table.grant(other) is theirs
    assert table.grant(None) is None and table.grant("") is None
    assert table.grant(token[:-1]) is None  # a near miss is nothing
    assert table.grant("sk-ant-" + token) is None


def test_the_table_holds_digests_not_tokens() -> None:
    table = Capabilities()
    token = table.issue(grant())
    assert token.encode() not in repr(table._grants).encode() and len(table) == 1


def test_an_unbound_capability_is_bound_once_to_the_phase_that_takes_it() -> None:
    table = Capabilities()
    token = table.issue()  # a warm-pool CLI's, before a phase takes the process
    assert table.grant(token) is None
    first, second = grant("p1"), grant("p2")
    assert table.bind(token, first)
    assert not table.bind(token, second)  # never re-bound to another phase
    assert table.grant(token) is first
    assert not table.bind(PREFIX + "unknown", first)


def test_the_api_capability_is_the_x_api_key_or_a_bearer_token() -> None:
    assert presented_api_capability([(b"x-api-key", b"cap1")]) == "cap1"
    assert presented_api_capability([(b"authorization", b"Bearer cap2")]) == "cap2"
    assert presented_api_capability([(b"authorization", b"Bearer cap2"), (b"x-api-key", b"cap1")]) == "cap1"
    assert presented_api_capability([(b"authorization", b"Basic eHg6eXk=")]) is None
    assert presented_api_capability([]) is None


def test_the_proxy_capability_is_the_basic_password() -> None:
    header = b"Basic " + base64.b64encode(b"phase:helix-cap-abc")
    assert presented_proxy_capability(header) == "helix-cap-abc"
    assert presented_proxy_capability(b"basic " + base64.b64encode(b"anyone:x:y")) == "x:y"
    assert presented_proxy_capability(b"Basic !!!") is None
    assert presented_proxy_capability(b"Bearer helix-cap-abc") is None
    assert presented_proxy_capability(b"Basic " + base64.b64encode(b"nocolon")) is None
    assert presented_proxy_capability(None) is None


def test_model_allowlist_patterns() -> None:
    models = ModelAllowlist(("claude-sonnet-4-5*", "claude-haiku-4-5-20251001"))
    assert models.allows("claude-sonnet-4-5-20250929")
    assert models.allows("claude-haiku-4-5-20251001")
    assert not models.allows("claude-opus-4-1")
    assert not ModelAllowlist(()).allows("anything")


def test_a_log_line_anyone_can_provoke_is_throttled(caplog) -> None:
    import logging

    from helix_runner.egress.log_throttle import LogThrottle

    throttle = LogThrottle(logging.getLogger("helix-test-throttle"), "refused", interval_s=3600)
    with caplog.at_level(logging.WARNING, logger="helix-test-throttle"):
        for _ in range(1000):
            throttle.warning(status=401)
        throttle._last -= 7200  # the interval passed: the next line says how many were left out
        throttle.warning(status=401)
    assert [r.fields["suppressed_since_last"] for r in caplog.records] == [0, 999]

"""Allowlist entries and a phase's egress policy: names, wildcards, ports, exceptions, own ports."""

from __future__ import annotations

import ipaddress

import pytest

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.egress.allowlist import (
    MAX_REQUEST_ENTRIES,
    DomainPattern,
    EgressPolicy,
    parse_pattern,
    request_patterns,
)
from helix_runner.errors import RunnerError

PORTS = frozenset({80, 443})


def test_entries_parse_to_names_wildcards_and_ports() -> None:
    assert parse_pattern("PyPI.org", PORTS) == DomainPattern("pypi.org")
    assert parse_pattern("pypi.org.", PORTS) == DomainPattern("pypi.org")
    assert parse_pattern("*.pythonhosted.org", PORTS) == DomainPattern("pythonhosted.org", wildcard=True)
    assert parse_pattern("example.com:443", PORTS) == DomainPattern("example.com", port=443)
    assert str(parse_pattern("*.example.com:80", PORTS)) == "*.example.com:80"
    assert parse_pattern("bücher.example", PORTS).domain == "xn--bcher-kva.example"


@pytest.mark.parametrize(("entry", "problem"), [
    ("1.2.3.4", "IP addresses"),
    ("[::1]", "IP addresses"),
    ("[::1]:443", "IP addresses"),
    ("169.254.169.254:80", "IP addresses"),
    ("example.com:22", "port 22 is not allowed"),
    ("localhost", "at least two labels"),
    ("*", "wildcard"),
    ("*.com", "at least two labels"),
    ("a.*.example.com", "wildcard"),
    ("exa mple.com", "domain name"),
    ("-bad.example.com", "domain name"),
    ("a" * 64 + ".com", "domain name"),
    ("", "1 to"),
    ("x" * 300, "1 to"),
    ("example.123", "IP addresses"),
])  # fmt: skip
def test_bad_entries_are_refused_with_the_reason(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_pattern(entry, PORTS)


def test_a_request_s_bad_entry_is_an_invalid_field_naming_it() -> None:
    with pytest.raises(RunnerError) as caught:
        request_patterns(["pypi.org", "10.0.0.1"], PORTS)
    err = caught.value
    assert err.reason == "INVALID_FIELD" and err.metadata["field"] == "options.egress_allowlist"
    assert err.metadata["entry"] == "10.0.0.1" and "10.0.0.1" in err.message
    with pytest.raises(RunnerError) as caught:
        request_patterns([f"h{i}.example.com" for i in range(MAX_REQUEST_ENTRIES + 1)], PORTS)
    assert caught.value.metadata["count"] == str(MAX_REQUEST_ENTRIES + 1)
    assert request_patterns(["a.example.com", "A.example.com"], PORTS) == (DomainPattern("a.example.com"),)


def test_a_policy_allows_listed_names_on_allowed_ports_only() -> None:
    policy = EgressPolicy(allowlist=(DomainPattern("pypi.org"),)).with_entries(
        [DomainPattern("pythonhosted.org", wildcard=True), DomainPattern("example.com", port=80)])
    assert policy.check_name("pypi.org", 443) is None
    assert policy.check_name("PYPI.org.", 443) is None
    assert policy.check_name("files.pythonhosted.org", 443) is None
    assert "not in the phase's egress allowlist" in policy.check_name("pythonhosted.org", 443)  # not the apex
    assert "not in" in policy.check_name("evilpypi.org", 443)
    assert "not in" in policy.check_name("pypi.org.evil.com", 443)
    assert policy.check_name("example.com", 80) is None
    assert "not in" in policy.check_name("example.com", 443)  # that entry names port 80
    assert "port 22 is not allowed" in policy.check_name("pypi.org", 22)
    assert "IP addresses" in policy.check_name("151.101.0.223", 443)


def test_addresses_are_checked_after_resolution_and_operator_exceptions_apply() -> None:
    ip = ipaddress.ip_address
    policy = EgressPolicy(allowlist=(DomainPattern("pypi.org"),),
                          exceptions=OperatorExceptions.parse(["registry.internal:8080", "127.0.0.2:3141"]),
                          own_ports=frozenset({50051, 3141}))
    assert policy.check_address("pypi.org", 443, ip("151.101.0.223"), local=False) is None
    assert "a private address" in policy.check_address("pypi.org", 443, ip("10.0.0.5"), local=False)
    assert "link-local" in policy.check_address("pypi.org", 443, ip("169.254.169.254"), local=False)
    # The exceptions pass both checks, for their own host and port only.
    assert policy.check_name("registry.internal", 8080) is None
    assert policy.check_address("registry.internal", 8080, ip("10.0.0.5"), local=False) is None
    assert policy.check_address("registry.internal", 8081, ip("10.0.0.5"), local=False) is not None
    # The server's own ports never: not even where the operator allowed the host and port.
    assert "the server's own ports" in policy.check_address("127.0.0.2", 3141, ip("127.0.0.2"), local=True)
    assert "own ports" in policy.check_address("pypi.org", 50051, ip("127.0.0.1"), local=False)
    assert "own ports" in policy.check_address("pypi.org", 50051, ip("151.101.0.223"), local=True)


def test_http_rules_parse_methods_names_and_paths() -> None:
    rule = parse_pattern("GET,HEAD github.com/org/*", PORTS)
    assert rule == DomainPattern("github.com", methods=frozenset({"GET", "HEAD"}), path="/org/*")
    assert rule.is_rule and str(rule) == "GET,HEAD github.com/org/*"
    assert str(parse_pattern("POST api.example.com:443/v1/run", PORTS)) == "POST api.example.com:443/v1/run"
    assert parse_pattern("GET *.example.com", PORTS) == DomainPattern("example.com", wildcard=True,
                                                                    methods=frozenset({"GET"}))
    assert parse_pattern("example.com/docs/*", PORTS).methods == frozenset()
    assert not parse_pattern("example.com", PORTS).is_rule


@pytest.mark.parametrize(("entry", "problem"), [
    ("get github.com/x", "unknown method 'get'"),
    ("CONNECT github.com/x", "unknown method"),
    ("GET github.com /x", "no spaces"),
    ("GET github.com/a*b", "'\\*' except a final one"),
    ("GET github.com/a%2fb", "no '%'"),
    ("GET 10.0.0.1/x", "IP addresses"),
    ("github.com/*", "names methods, a path, or both"),
    ("GET github.com:22/x", "port 22"),
    ("GET " + "a" * 1100 + ".com/", "at most 1024"),
])  # fmt: skip
def test_bad_http_rules_are_refused_with_the_reason(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_pattern(entry, PORTS)


def test_a_host_with_only_rules_checks_each_request_and_names_the_rules() -> None:
    policy = EgressPolicy(allowlist=(parse_pattern("GET,HEAD git.example.com/org/*", PORTS),
                                     parse_pattern("POST git.example.com/org/repo.git/git-upload-pack", PORTS),
                                     DomainPattern("pypi.org")))
    assert policy.check_name("git.example.com", 443) is None  # a rule admits its host
    assert policy.check_request("git.example.com", 443, "GET", "/org/repo.git/info/refs") is None
    assert policy.check_request("git.example.com", 443, "POST", "/org/repo.git/git-upload-pack") is None
    why = policy.check_request("git.example.com", 443, "POST", "/org/repo.git/git-receive-pack")
    assert "POST git.example.com/org/repo.git/git-receive-pack matches no HTTP rule" in why
    assert "GET,HEAD git.example.com/org/*" in why  # the rule that decided is named
    assert "matches no" in policy.check_request("git.example.com", 443, "GET", "/other/x")
    assert "matches no" in policy.check_request("git.example.com", 443, "GET", "/org")  # '/org/*' is below /org/
    for sneaky in ("/org/../admin", "/org/%2e%2e/admin", "/org//x", "/org/a%2Fb", "/org/..", "/org/.\\x"):
        assert "canonical form" in policy.check_request("git.example.com", 443, "GET", sneaky), sneaky
    assert policy.check_request("pypi.org", 443, "DELETE", "/anything") is None  # no rule: not checked
    assert policy.http_rules("pypi.org", 443) == ()
    # Entries add up: a plain entry for the host lifts its rules.
    lifted = policy.with_entries([DomainPattern("git.example.com")])
    assert lifted.http_rules("git.example.com", 443) == ()
    assert lifted.check_request("git.example.com", 443, "POST", "/other") is None

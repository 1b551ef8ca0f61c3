"""The webhook POST against a real HTTP(S) receiver: signatures it verifies, refused addresses, rebinding,
timeouts and the response-size cap."""

from __future__ import annotations

import ipaddress
import time

import orjson
import pytest
from support.certs import CertificateAuthority
from support.webhook_receiver import Response, WebhookReceiver

from helix_runner.domain.addresses import OperatorExceptions
from helix_runner.webhook_http.sender import SenderSettings, WebhookSender, system_connector
from helix_runner.webhook_http.signing import check_secret, new_secret, signed_headers
from helix_runner.webhook_http.target import WebhookUrl

SECRET = new_secret()
BODY = orjson.dumps({"type": "phase.finished", "data": {"job_id": "j", "phase_id": "p", "sequence": 3}})
PUBLIC = ipaddress.ip_address("93.184.216.34")  # a public address; the tests never connect to it


@pytest.fixture
def receiver():
    r = WebhookReceiver(SECRET).start()
    yield r
    r.stop()


def sender_for(receiver: WebhookReceiver, **settings) -> WebhookSender:
    return WebhookSender(SenderSettings(exceptions=OperatorExceptions.parse([receiver.allow]), **settings))


async def post(sender: WebhookSender, url: str, delivery_id: str = "msg_1"):
    try:
        return await sender.post(url, signed_headers(SECRET, delivery_id, BODY, time.time()), BODY)
    finally:
        await sender.close()


async def test_a_delivery_carries_a_signature_the_receivers_library_verifies(receiver):
    result = await post(sender_for(receiver), receiver.url, "msg_abc")
    assert (result.status_code, result.error) == (200, "") and result.latency_ns > 0
    (got,) = receiver.snapshot()
    assert got.verified and got.body == BODY and got.webhook_id == "msg_abc"
    assert got.headers["webhook-signature"].startswith("v1,") and got.headers["content-type"] == "application/json"


async def test_a_wrong_secret_fails_the_receivers_verification(receiver):
    other = new_secret()
    sender = sender_for(receiver)
    try:
        await sender.post(receiver.url, signed_headers(other, "msg_1", BODY, time.time()), BODY)
    finally:
        await sender.close()
    assert [r.verified for r in receiver.snapshot()] == [False]  # the check above can fail


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}/hook", "http://localhost:{port}/hook",
                                 "http://[::ffff:127.0.0.1]:{port}/hook"])
async def test_loopback_is_refused_unless_the_operator_allows_it(receiver, url):
    result = await post(WebhookSender(SenderSettings()), url.format(port=receiver.port))
    assert result.status_code is None and result.error.startswith("destination refused: ")
    assert "loopback" in result.error
    assert receiver.snapshot() == []


async def test_a_name_that_rebinds_to_loopback_after_the_check_reaches_only_the_checked_address(receiver):
    """The first answer is public, every later one is 127.0.0.1 (a rebinding DNS server): the connection
    goes to the address that was checked, and the name is resolved once."""
    answers = [[PUBLIC]]
    resolved, connected = [], []

    async def rebinding(host: str, port: int):
        resolved.append(host)
        return answers.pop(0) if answers else [ipaddress.ip_address("127.0.0.1")]

    async def network(ip, port, timeout, options):  # stands in for the internet: the public address is the receiver
        connected.append(ip)
        assert ip == PUBLIC, "connected to an address that was not checked"
        return await system_connector(ipaddress.ip_address("127.0.0.1"), receiver.port, timeout, options)

    sender = WebhookSender(SenderSettings(), resolver=rebinding, connector=network)
    result = await post(sender, f"http://hooks.example.com:{receiver.port}/hook")
    assert result.status_code == 200 and connected == [PUBLIC] and resolved == ["hooks.example.com"]
    assert receiver.snapshot()[0].verified

    answers.clear()  # now the name answers loopback only: refused before any connection
    result = await post(WebhookSender(SenderSettings(), resolver=rebinding, connector=network),
                        f"http://hooks.example.com:{receiver.port}/hook")
    assert result.status_code is None and "hooks.example.com resolved to 127.0.0.1, a loopback address" in result.error
    assert connected == [PUBLIC] and len(receiver.snapshot()) == 1


async def test_a_name_with_private_and_public_addresses_is_reached_only_at_the_public_one(receiver):
    connected = []

    async def mixed(host, port):
        return [ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("169.254.169.254"), PUBLIC]

    async def network(ip, port, timeout, options):
        connected.append(ip)
        return await system_connector(ipaddress.ip_address("127.0.0.1"), receiver.port, timeout, options)

    result = await post(WebhookSender(SenderSettings(), resolver=mixed, connector=network),
                        f"http://hooks.example.com:{receiver.port}/h")
    assert result.status_code == 200 and connected == [PUBLIC]


async def test_a_slow_receiver_times_out_and_a_huge_answer_is_not_read_to_its_end(receiver):
    receiver.respond(Response(delay_s=3.0))
    result = await post(sender_for(receiver, timeout_s=0.5), receiver.url)
    assert result.status_code is None and "0.5 s" in result.error
    receiver.respond(Response(status=200, body_bytes=50 * 1024 * 1024))
    result = await post(sender_for(receiver, max_response_bytes=4096), receiver.url)
    assert result.status_code == 200 and result.error == ""


async def test_retry_after_is_read_from_the_answer(receiver):
    receiver.respond(Response(status=503, retry_after="42"))
    result = await post(sender_for(receiver), receiver.url)
    assert (result.status_code, result.retry_after) == (503, "42")


async def test_https_is_verified_against_the_urls_host_on_the_checked_address(tmp_path):
    ca = CertificateAuthority(tmp_path / "ca")
    leaf = ca.issue("hook", dns=("hooks.example.com",))
    receiver = WebhookReceiver(SECRET, tls=(leaf.cert_file, leaf.key_file)).start()
    try:
        async def resolve(host, port):
            return [ipaddress.ip_address("127.0.0.1")]

        allow = OperatorExceptions.parse([f"hooks.example.com:{receiver.port}"])
        sender = WebhookSender(SenderSettings(exceptions=allow, ca_file=ca.ca_file), resolver=resolve)
        result = await post(sender, f"https://hooks.example.com:{receiver.port}/hook")
        assert result.status_code == 200 and receiver.snapshot()[0].verified
        # The same certificate does not name 127.0.0.1: verification by host, not by address.
        sender = WebhookSender(SenderSettings(exceptions=OperatorExceptions.parse([receiver.allow]),
                                              ca_file=ca.ca_file))
        result = await post(sender, f"https://127.0.0.1:{receiver.port}/hook")
        assert result.status_code is None and "CERTIFICATE_VERIFY_FAILED" in result.error
    finally:
        receiver.stop()


@pytest.mark.parametrize(("url", "problem"), [
    ("ftp://example.com/x", "must start with https:// or http://"),
    ("https://user:pw@example.com/x", "must not carry a user or password"),
    ("https:///x", "names no host"),
    ("https://example.com/x#frag", "must not have a fragment"),
    ("https://example.com:99999/x", "is not a valid URL"),
    ("https://exa mple.com/", "must not contain spaces"),
])
def test_webhook_urls_are_checked(url, problem):
    with pytest.raises(ValueError, match=problem):
        WebhookUrl.parse(url)


def test_ip_literal_urls_are_refused_when_created_unless_allowed():
    assert WebhookUrl.parse("http://10.1.2.3/h").literal_refusal(OperatorExceptions()) is not None
    assert WebhookUrl.parse("http://[fd00:ec2::254]/h").literal_refusal(OperatorExceptions()) is not None
    assert WebhookUrl.parse("http://10.1.2.3:80/h").literal_refusal(OperatorExceptions.parse(["10.1.2.3:80"])) is None
    assert WebhookUrl.parse("https://93.184.216.34/h").literal_refusal(OperatorExceptions()) is None
    assert WebhookUrl.parse("https://hooks.example.com/h").literal_refusal(OperatorExceptions()) is None  # at delivery


def test_secrets_are_whsec_base64_of_enough_bytes():
    assert check_secret(new_secret()) is None and new_secret() != new_secret()
    assert "must start with whsec_" in check_secret("secret")
    assert "base64" in check_secret("whsec_***")
    assert "24 to 64 bytes" in check_secret("whsec_c2hvcnQ=")

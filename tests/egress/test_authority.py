"""The server's CA for TLS termination: made once and kept, leaves minted per host and cached,
trusted by a client that trusts the phase's bundle, and not a CA anyone can extend."""

from __future__ import annotations

import asyncio
import ssl
import stat

from cryptography import x509

from helix_runner.egress.authority import CertificateAuthority


def test_the_ca_is_made_once_kept_private_and_its_bundle_holds_the_system_roots(tmp_path) -> None:
    ca = CertificateAuthority(tmp_path / "egress").load_or_create()
    key = tmp_path / "egress" / "ca-key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert ca.ca_file.parent == ca.trust_dir and ca.bundle_file.parent == ca.trust_dir
    bundle = ca.bundle_file.read_bytes()
    assert bundle.endswith(ca.ca_pem) and bundle.count(b"BEGIN CERTIFICATE") > 10  # system roots first
    again = CertificateAuthority(tmp_path / "egress").load_or_create()
    assert again.ca_pem == ca.ca_pem and key.read_bytes() == again._key_file.read_bytes()
    cert = x509.load_pem_x509_certificate(ca.ca_pem)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0  # it signs leaves, never another CA


def test_a_stranger_s_key_next_to_the_ca_is_refused(tmp_path) -> None:
    CertificateAuthority(tmp_path / "a").load_or_create()
    CertificateAuthority(tmp_path / "b").load_or_create()
    (tmp_path / "a" / "ca-key.pem").write_bytes((tmp_path / "b" / "ca-key.pem").read_bytes())
    try:
        CertificateAuthority(tmp_path / "a").load_or_create()
    except ValueError as exc:
        assert "is not the key of" in str(exc)
    else:
        raise AssertionError("a key that is not the CA's was used")


async def test_a_leaf_per_host_verifies_against_the_bundle_and_is_cached(tmp_path) -> None:
    ca = CertificateAuthority(tmp_path / "egress").load_or_create()
    context = ca.server_context("git.example.test")
    assert ca.server_context("GIT.example.test.") is context  # cached, by the name as compared
    ip_context = ca.server_context("127.0.0.1")

    async def handshake(server_context: ssl.SSLContext, name: str) -> str:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(ca.bundle_file))
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=name)
            peer = writer.get_extra_info("peercert")
            writer.close()
            return str(peer["subjectAltName"])
        finally:
            server.close()
            await server.wait_closed()

    assert "git.example.test" in await handshake(context, "git.example.test")
    assert "127.0.0.1" in await handshake(ip_context, "127.0.0.1")
    try:
        await handshake(context, "other.example.test")
    except ssl.SSLCertVerificationError:
        pass
    else:
        raise AssertionError("a leaf was accepted for a name it was not minted for")

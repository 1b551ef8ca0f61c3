"""The server's own certificate authority, for the egress proxy's TLS termination (interception.py).

Made at first start in ``<data_dir>/egress/`` and kept there: ``ca-key.pem`` (0600, hidden from
phases with the rest of the data dir) and, in ``trust/`` (the one part of the data dir a phase
may read), ``ca.pem`` and ``bundle.pem``: the system's roots followed by this CA, the file the
phase's ``SSL_CERT_FILE`` and the like name (service.py). The CA's name says which server made it;
it is valid for ten years and may sign only leaf certificates (path length 0).

A leaf is minted per host when the proxy first terminates TLS for it, with one key the server
makes at start (a leaf's signature is what costs; one key for all leaves is what interception
proxies do), valid for 30 days, and kept as a ready ``ssl.SSLContext`` (at most ``MAX_LEAVES``,
the least recently used dropped), so a later handshake costs only the handshake. Python's ``ssl``
loads a certificate only from a file, so each leaf is written once to ``leaves/`` (0600).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import re
import socket
import ssl
import threading
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

MAX_LEAVES = 1024
CA_DAYS = 3650
LEAF_DAYS = 30
_RENEW_BEFORE = datetime.timedelta(days=1)
_SAFE_NAME = re.compile(r"[^a-z0-9.-]")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` readable by the server's user only (made under a temporary name, then renamed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def system_roots() -> bytes:
    """The system's trusted roots (PEM), as OpenSSL finds them; empty if it finds none."""
    paths = ssl.get_default_verify_paths()
    for candidate in (os.environ.get("SSL_CERT_FILE"), paths.cafile, paths.openssl_cafile,
                      "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
        if candidate and os.path.isfile(candidate):
            try:
                return Path(candidate).read_bytes()
            except OSError:
                continue
    return b""


class CertificateAuthority:
    """The server's CA in ``directory`` (made there if absent) and the leaves it mints."""

    def __init__(self, directory: Path, *, name: str = "") -> None:
        self.directory = directory
        self.trust_dir = directory / "trust"
        self.ca_file = self.trust_dir / "ca.pem"
        self.bundle_file = self.trust_dir / "bundle.pem"
        self._key_file = directory / "ca-key.pem"
        self._leaves_dir = directory / "leaves"
        self._name = name or f"Helix Runner egress CA ({socket.gethostname()[:40]})"
        self._lock = threading.Lock()
        self._contexts: OrderedDict[str, tuple[ssl.SSLContext, datetime.datetime]] = OrderedDict()
        self._ca_key: ec.EllipticCurvePrivateKey
        self._ca_cert: x509.Certificate
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = self._leaf_key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption())

    def load_or_create(self) -> CertificateAuthority:
        """Reads the CA kept in the directory, or makes one (a CA about to expire is replaced), and
        writes the phases' trust files. OSError / ValueError when the files cannot be used."""
        for d in (self.directory, self._leaves_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.trust_dir.mkdir(mode=0o755, exist_ok=True)
        made = False
        if self._key_file.exists() and self.ca_file.exists():
            key = serialization.load_pem_private_key(self._key_file.read_bytes(), password=None)
            cert = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
            if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
                raise ValueError(f"{self._key_file} is not the key of {self.ca_file}")
            if cert.not_valid_after_utc - _now() < datetime.timedelta(days=30):
                key, cert, made = *self._make_ca(), True
        else:
            key, cert, made = *self._make_ca(), True
        self._ca_key, self._ca_cert = key, cert
        if made:
            _write_private(self._key_file, key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
        ca_pem = cert.public_bytes(serialization.Encoding.PEM)
        for path, data in ((self.ca_file, ca_pem), (self.bundle_file, system_roots().rstrip() + b"\n" + ca_pem)):
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.chmod(0o644)
            os.replace(tmp, path)
        if made:
            log.info("egress: made the server's CA for TLS termination", extra={"fields": {
                "ca_file": str(self.ca_file), "not_after": cert.not_valid_after_utc.isoformat()}})
        return self

    @property
    def ca_pem(self) -> bytes:
        return self._ca_cert.public_bytes(serialization.Encoding.PEM)

    def _make_ca(self) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self._name[:64])])
        now = _now()
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return key, cert

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a leaf for ``host`` (a name or an IP literal), minted on
        first use and cached."""
        host = host.lower().rstrip(".")
        now = _now()
        with self._lock:
            cached = self._contexts.get(host)
            if cached is not None and cached[1] - now > _RENEW_BEFORE:
                self._contexts.move_to_end(host)
                return cached[0]
        context, not_after = self._mint(host, now)
        with self._lock:
            self._contexts[host] = (context, not_after)
            self._contexts.move_to_end(host)
            while len(self._contexts) > MAX_LEAVES:
                self._contexts.popitem(last=False)
        return context

    def _mint(self, host: str, now: datetime.datetime) -> tuple[ssl.SSLContext, datetime.datetime]:
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        not_after = now + datetime.timedelta(days=LEAF_DAYS)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
                .issuer_name(self._ca_cert.subject).public_key(self._leaf_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([san]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                               critical=False)
                .sign(self._ca_key, hashes.SHA256()))
        path = self._leaves_dir / (_SAFE_NAME.sub("_", host)[:200] + ".pem")
        _write_private(path, cert.public_bytes(serialization.Encoding.PEM) + self._ca_cert.public_bytes(
            serialization.Encoding.PEM) + self._leaf_key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])  # the proxy reads HTTP/1.1 inside (no h2)
        context.load_cert_chain(path)
        return context, not_after

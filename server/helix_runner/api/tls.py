"""TLS and mutual TLS for the gRPC port and for control forwarded between replicas.

The certificate, its key and the client CA are PEM files re-read when they change on disk, so a
rotated certificate (cert-manager renewing a Secret, a person replacing the files) is served to
new connections without a restart; connections already open keep the certificate they started
with. The server side uses grpc's certificate-configuration fetcher
(``grpc.dynamic_ssl_server_credentials``): grpc calls it on each new connection's handshake, from
one of its own threads (not the event loop), and it answers None ("unchanged") unless the files
changed. It works with ``grpc.aio.Server.add_secure_port`` (tests/api/test_tls.py).

The files are compared by (device, inode, size, mtime) first, so an unchanged set costs three
``stat`` calls per handshake; a changed set is read and used only when the certificate and key
belong together (checked with the ``ssl`` module), so a rotation caught half-way (the new
certificate written, the old key still there) keeps the previous pair until the key follows.
A Kubernetes Secret volume swaps all files at once (one symlink), so it is never caught half-way.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CertificateSet:
    """One consistent reading of the files: PEM bytes, and the stat signature they were read at."""

    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None
    signature: tuple


class CertificateFiles:
    """The TLS files of a server, re-read when they change; thread-safe (grpc calls it from its threads)."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca_file: Path | None = None):
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._lock = threading.Lock()
        self._current = self._read(self._signature())  # the config validated these; errors are OSError here
        if self._current is None:
            raise ValueError(f"{cert_file} and {key_file} are not a certificate and its key")
        self._refused: tuple | None = None  # the signature of a set already logged as refused
        self.version = 0  # +1 each time the content (not just the files' times) changes

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None

    @property
    def current(self) -> CertificateSet:
        """The newest consistent set (re-checked on disk first)."""
        self.refresh()
        return self._current

    def refresh(self) -> bool:
        """Re-reads the files if they changed; True when a new consistent set was taken."""
        try:
            signature = self._signature()
        except OSError as exc:  # mid-rotation (a file briefly missing) or removed: keep serving the last set
            self._log_refused(("missing", str(exc)), f"cannot stat a TLS file: {exc}")
            return False
        with self._lock:
            if signature == self._current.signature or signature == self._refused:
                return False
            try:
                fresh = self._read(signature)
            except OSError as exc:
                self._log_refused(signature, f"cannot read a TLS file: {exc}")
                return False
            if fresh is None:
                self._log_refused(signature, "the certificate and key on disk do not match or do not parse")
                return False
            same = (fresh.certificate_chain, fresh.private_key, fresh.client_ca) == (
                self._current.certificate_chain, self._current.private_key, self._current.client_ca)
            self._current = fresh
            self._refused = None
            if same:  # touched, not changed: grpc keeps its configuration
                return False
            self.version += 1
        log.info("TLS certificate reloaded", extra={"fields": {"cert_file": str(self.cert_file)}})
        return True

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for ``add_secure_port`` that pick up changed files at each new connection."""
        return grpc.dynamic_ssl_server_credentials(
            self._server_configuration(self._current),
            self._fetch,
            require_client_authentication=self.mutual,
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by grpc on its own threads before each handshake; None keeps the current configuration.
        try:
            changed = self.refresh()
        except Exception:  # an exception here would fail the handshake; keep serving the last set instead
            log.exception("TLS certificate reload failed; the previous certificate stays in use")
            return None
        return self._server_configuration(self._current) if changed else None

    def https_context(self) -> ssl.SSLContext:
        """A server context for the dashboard's HTTPS port that serves the newest certificate.

        Python's ``ssl`` has no certificate fetcher; its ``sni_callback`` runs on every ClientHello
        (with or without a server name) before the certificate is chosen, and may switch the
        connection to another context, so each new connection gets the files' current pair. No
        client certificate is asked for: browsers rarely hold one; the bearer token guards the API.
        """
        listening = self._https_context(self._current)
        newest = [self.version, listening]

        def on_client_hello(connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
            try:
                self.refresh()
                current, version = self._current, self.version
                if version != newest[0]:
                    newest[:] = [version, self._https_context(current)]
                connection.context = newest[1]
            except Exception:  # an exception here would fail the handshake; keep serving the last set
                log.exception("TLS certificate reload failed; the previous certificate stays in use")

        listening.sni_callback = on_client_hello
        return listening

    @staticmethod
    def _https_context(current: CertificateSet) -> ssl.SSLContext:
        context = _server_context(current.certificate_chain, current.private_key)
        if context is None:  # a set is taken only when its pair loads (_read)
            raise ValueError("the certificate and key are not a pair")
        context.set_alpn_protocols(["http/1.1"])
        return context

    @staticmethod
    def _server_configuration(current: CertificateSet) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(current.private_key, current.certificate_chain)], root_certificates=current.client_ca
        )

    def _signature(self) -> tuple:
        paths = [self.cert_file, self.key_file] + ([self.client_ca_file] if self.client_ca_file else [])
        out = []
        for path in paths:
            st = os.stat(path)
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def _read(self, signature: tuple) -> CertificateSet | None:
        cert = self.cert_file.read_bytes()
        key = self.key_file.read_bytes()
        ca = self.client_ca_file.read_bytes() if self.client_ca_file else None
        if not _pair_matches(cert, key) or (ca is not None and b"-----BEGIN CERTIFICATE-----" not in ca):
            return None
        return CertificateSet(cert, key, ca, signature)

    def _log_refused(self, signature: tuple, message: str) -> None:
        if signature != self._refused:
            self._refused = signature
            log.warning(message + "; the previous certificate stays in use",
                        extra={"fields": {"cert_file": str(self.cert_file), "key_file": str(self.key_file)}})


def _server_context(cert: bytes, key: bytes) -> ssl.SSLContext | None:
    """A TLS server context holding ``cert`` and its unencrypted ``key``; None if they are not a pair."""
    # ssl loads a chain only from files: a private temporary directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="helix-tls-") as tmp:
        cert_path, key_path = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # TLS 1.2 at least (Python's default)
        try:
            context.load_cert_chain(cert_path, key_path, password=_no_passphrase)
        except (ssl.SSLError, ValueError, TypeError):
            return None
    return context


def _pair_matches(cert: bytes, key: bytes) -> bool:
    """Whether ``cert`` is a PEM certificate (chain) and ``key`` its unencrypted private key."""
    return _server_context(cert, key) is not None


def _no_passphrase() -> bytes:
    raise ValueError("encrypted key")


class ForwardingCredentials:
    """Client credentials of a replica that forwards control to another: its own cert and key as identity.

    The owner is verified against the client CA (every replica's certificate comes from the issuer
    that the replicas accept clients from) or, without one, grpc's default roots. ``generation``
    changes when the files change, so the forwarder re-creates its channels with the new identity.
    """

    def __init__(self, files: CertificateFiles, server_name: str = ""):
        self.files = files
        self.server_name = server_name

    @property
    def generation(self) -> int:
        self.files.refresh()
        return self.files.version

    def channel(self, address: str) -> grpc.aio.Channel:
        current = self.files.current
        credentials = grpc.ssl_channel_credentials(
            root_certificates=current.client_ca,
            private_key=current.private_key,
            certificate_chain=current.certificate_chain,
        )
        options = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        return grpc.aio.secure_channel(address, credentials, options=options)

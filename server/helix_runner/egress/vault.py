"""The credential vault's cryptography and a phase's view of its project's secrets.

Values are sealed with AES-256-GCM (``cryptography``'s AEAD) under the vault key: 32 bytes from
``vault_key_file`` or ``HELIX_RUNNER_VAULT_KEY`` (base64), or made at first start in the data dir
(``egress/vault.key``, 0600) when neither is set. The associated data is the secret's whole binding
(project, name, hosts, presentation), so a row whose hosts someone changed in the database does
not open: a secret cannot be redirected to another host without the key. A row records the key's
id (the first 8 bytes of its SHA-256, hex) so a server with another key says so.

A phase takes its project's sealed secrets when it starts (``PhaseCredentials``); a value is
opened only when the proxy adds it to a request, and never logged or put in an event.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from helix_runner.domain.egress_secrets import SecretBinding

log = logging.getLogger(__name__)

KEY_ENV = "HELIX_RUNNER_VAULT_KEY"
NONCE_BYTES = 12


class VaultKeyError(ValueError):
    """The vault key cannot be read or is not 32 bytes of base64."""


def _aad(binding: SecretBinding) -> bytes:
    p = binding.presentation
    return "\0".join((binding.project, binding.name, ",".join(binding.host_strings()), p.kind, p.header,
                      p.username)).encode()


@dataclass(frozen=True)
class SealedSecret:
    """A secret as stored: its binding, the key's id, the nonce and the ciphertext (tag included)."""

    binding: SecretBinding
    key_id: str
    nonce: bytes
    ciphertext: bytes
    create_time_ns: int = 0


class Vault:
    """Seals and opens secrets under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise VaultKeyError("the vault key must be 32 bytes (base64 of 32 random bytes)")
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(key).hexdigest()[:16]

    @classmethod
    def load(cls, key_file: Path | None, env: dict[str, str], data_dir: Path) -> Vault:
        """The key from ``key_file``, else the environment, else ``<data_dir>/egress/vault.key``
        (made there on first use); VaultKeyError saying which source is wrong."""
        if key_file is not None:
            return cls(_decode(key_file.read_text(), str(key_file)))
        if env.get(KEY_ENV):
            return cls(_decode(env[KEY_ENV], KEY_ENV))
        path = data_dir / "egress" / "vault.key"
        if not path.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(base64.b64encode(secrets.token_bytes(32)).decode() + "\n")
            log.info("egress vault: made a key in the data dir (replicas sharing a database need one key: set "
                     "vault_key_file or HELIX_RUNNER_VAULT_KEY)", extra={"fields": {"key_file": str(path)}})
        return cls(_decode(path.read_text(), str(path)))

    def seal(self, binding: SecretBinding, value: bytes, create_time_ns: int = 0) -> SealedSecret:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return SealedSecret(binding, self.key_id, nonce, self._aead.encrypt(nonce, value, _aad(binding)),
                            create_time_ns)

    def open(self, sealed: SealedSecret) -> bytes | None:
        """The value; None when it was sealed under another key or its row was changed."""
        if sealed.key_id != self.key_id:
            return None
        try:
            return self._aead.decrypt(sealed.nonce, sealed.ciphertext, _aad(sealed.binding))
        except InvalidTag:
            return None


def _decode(text: str, source: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise VaultKeyError(f"{source}: the vault key is not base64") from None
    if len(key) != 32:
        raise VaultKeyError(f"{source}: the vault key must be 32 bytes, not {len(key)}")
    return key


class PhaseCredentials:
    """The secrets one phase's requests may carry: its project's, as sealed when the phase started."""

    def __init__(self, vault: Vault, sealed: tuple[SealedSecret, ...]) -> None:
        self._vault = vault
        self._sealed = sealed
        self._unopenable_logged: set[str] = set()

    @property
    def bindings(self) -> tuple[SecretBinding, ...]:
        return tuple(s.binding for s in self._sealed)

    def bound(self, host: str, port: int) -> bool:
        return any(s.binding.bound_to(host, port) for s in self._sealed)

    def for_host(self, host: str, port: int) -> list[tuple[SecretBinding, bytes]]:
        """The bindings and values of the secrets bound to ``host:port`` (opened now)."""
        out = []
        for sealed in self._sealed:
            if not sealed.binding.bound_to(host, port):
                continue
            value = self._vault.open(sealed)
            if value is None:
                if sealed.binding.name not in self._unopenable_logged:
                    self._unopenable_logged.add(sealed.binding.name)
                    log.error("egress vault: a secret does not open with this server's key (another key, or its "
                              "row was changed); it is not added", extra={"fields": {
                                  "project": sealed.binding.project, "secret": sealed.binding.name,
                                  "key_id": sealed.key_id}})
                continue
            out.append((sealed.binding, value))
        return out

    def placeholders(self) -> dict[str, str]:
        """``HELIX_SECRET_<NAME>`` -> its placeholder, for the phase's environment."""
        return {s.binding.env_name: s.binding.placeholder for s in self._sealed}

"""The credential vault's commands: put, list and delete a project's secrets, and a phase's share.

Write-only: a value goes in (validated, sealed with the vault key: egress/vault.py) and never comes
back out through the API, a log or an event; listing shows names, hosts and presentation. Rows
live in the store, so every replica of a shared database sees them; a phase takes its project's
secrets when it starts (``sealed_for``), so a change applies to phases started after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from helix_runner.domain.egress_secrets import (
    MAX_SECRETS_PER_PROJECT,
    Presentation,
    SecretBinding,
    parse_host,
    validate,
)
from helix_runner.egress.vault import SealedSecret, Vault
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.store.protocol import EgressSecretRow, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SecretInfo:
    """What listing shows of a secret: never its value. ``openable``: it opens with this server's key."""

    binding: SecretBinding
    create_time_ns: int
    openable: bool


def _binding(row: EgressSecretRow) -> SecretBinding:
    return SecretBinding(row.project_id, row.name, tuple(parse_host(h) for h in row.hosts),
                         Presentation(row.presentation, row.header, row.username))


def _sealed(row: EgressSecretRow) -> SealedSecret:
    return SealedSecret(_binding(row), row.key_id, row.nonce, row.ciphertext, row.create_time_ns)


class EgressVault:
    """A project's secrets in the store, sealed with the server's vault key."""

    def __init__(self, store: Store, vault: Vault, clock: Callable[[], int] = time.time_ns) -> None:
        self.store = store
        self.vault = vault
        self.clock = clock

    def put(self, project: str, name: str, value: bytes, hosts: list[str], presentation: str, header: str = "",
            username: str = "") -> SecretInfo:
        """Stores (or replaces) a secret; INVALID_FIELD naming the field for bad input, RESOURCE_EXHAUSTED
        when the project has ``MAX_SECRETS_PER_PROJECT``."""
        try:
            binding = validate(project, name, hosts, presentation, header, username, value)
        except ValueError as exc:
            field, _, problem = str(exc).partition(": ")
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", str(exc),
                              {"field": field, "problem": problem}) from None
        sealed = self.vault.seal(binding, value, self.clock())
        p = binding.presentation
        row = EgressSecretRow(project, name, binding.host_strings(), p.kind, p.header, p.username, sealed.key_id,
                              sealed.nonce, sealed.ciphertext, sealed.create_time_ns)
        if not self.store.put_egress_secret(row, MAX_SECRETS_PER_PROJECT):
            raise RunnerError(ErrorKind.RESOURCE_EXHAUSTED, "SECRETS_LIMIT",
                              f"project {project!r} has {MAX_SECRETS_PER_PROJECT} secrets; delete one first",
                              {"project_id": project, "max": str(MAX_SECRETS_PER_PROJECT)})
        log.info("egress vault: a secret was stored", extra={"fields": {
            "project": project, "secret": name, "hosts": list(binding.host_strings()), "presentation": str(p)}})
        return SecretInfo(binding, sealed.create_time_ns, True)

    def list(self, project: str) -> list[SecretInfo]:
        if not project:
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", "project_id: is required",
                              {"field": "project_id", "problem": "is required"})
        return [SecretInfo(_binding(r), r.create_time_ns, self.vault.open(_sealed(r)) is not None)
                for r in self.store.list_egress_secrets(project)]

    def delete(self, project: str, name: str) -> None:
        if not project or not name:
            field = "project_id" if not project else "name"
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{field}: is required",
                              {"field": field, "problem": "is required"})
        if not self.store.delete_egress_secret(project, name):
            raise RunnerError(ErrorKind.NOT_FOUND, "SECRET_NOT_FOUND",
                              f"project {project!r} has no secret {name[:80]!r}",
                              {"project_id": project, "name": name[:80]})
        log.info("egress vault: a secret was deleted", extra={"fields": {"project": project, "secret": name}})

    def sealed_for(self, project: str) -> tuple[SealedSecret, ...]:
        """The project's secrets, sealed, for a phase starting now."""
        return tuple(_sealed(r) for r in self.store.list_egress_secrets(project))

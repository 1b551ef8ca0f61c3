"""Who may do what to which project: principals, roles and the one check every call goes through.

A principal is whoever made a call (a named static token, a JWT's subject, a client certificate's
subject, or ``admin``: the single token of older setups). It holds *grants*: per project, a set of
roles; the project ``*`` stands for every project. The roles (issue 32, docs/tenancy.md):

* ``viewer``: read and watch;
* ``operator``: run, cancel, pause, resume, step, inject, interrupt, set model or mode (and read);
* ``approver``: resolve held tool calls and held network requests (and read);
* ``admin``: all of the above, plus webhooks, secrets, server status.

A role implies the ones it lists: ``admin`` every other, ``operator`` and ``approver`` ``viewer``.
Plain Python, no I/O: the API layer maps credentials to a principal and a request to the project
it touches, then asks ``Principal.may``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

EVERY_PROJECT = "*"


class Role(enum.Enum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    APPROVER = "approver"
    ADMIN = "admin"


# What holding a role lets a principal do as well.
_IMPLIES: Mapping[Role, frozenset[Role]] = {
    Role.VIEWER: frozenset({Role.VIEWER}),
    Role.OPERATOR: frozenset({Role.OPERATOR, Role.VIEWER}),
    Role.APPROVER: frozenset({Role.APPROVER, Role.VIEWER}),
    Role.ADMIN: frozenset(Role),
}


def parse_roles(names: Iterable[str], where: str) -> frozenset[Role]:
    """The roles named (ValueError naming ``where`` and the valid names for an unknown one)."""
    roles: set[Role] = set()
    for name in names:
        try:
            roles |= _IMPLIES[Role(str(name).strip().lower())]
        except ValueError:
            raise ValueError(f"{where}: unknown role {name!r} (one of: "
                             f"{', '.join(r.value for r in Role)})") from None
    return frozenset(roles)


def parse_grants(raw: Mapping[str, Iterable[str]], where: str) -> dict[str, frozenset[Role]]:
    """``{"team-a": ["operator"], "*": ["viewer"]}`` as grants (ValueError on a bad project or role)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: grants must map a project (or \"*\") to a list of roles")
    grants: dict[str, frozenset[Role]] = {}
    for project, names in raw.items():
        if not isinstance(project, str) or not project or len(project) > 128:
            raise ValueError(f"{where}: a project name must be 1-128 characters")
        if isinstance(names, str) or not isinstance(names, Iterable):
            raise ValueError(f"{where}: the roles of {project!r} must be a list")
        grants[project] = parse_roles(names, f"{where} ({project})")
    return grants


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a call, with what it may do; ``source`` says how it was known (token, jwt, certificate)."""

    name: str
    grants: Mapping[str, frozenset[Role]] = field(default_factory=dict)
    source: str = "token"

    def may(self, role: Role, project: str) -> bool:
        """Whether this principal holds ``role`` on ``project``."""
        held = self.grants.get(project)
        if held is not None and role in held:
            return True
        every = self.grants.get(EVERY_PROJECT)
        return every is not None and role in every

    def everywhere(self, role: Role) -> bool:
        """Whether it holds ``role`` on every project (a listing over all projects is then unfiltered)."""
        every = self.grants.get(EVERY_PROJECT)
        return every is not None and role in every

    def projects(self, role: Role) -> frozenset[str]:
        """The projects it holds ``role`` on by name (without ``*``)."""
        return frozenset(p for p, roles in self.grants.items() if p != EVERY_PROJECT and role in roles)

    def describe(self) -> dict[str, list[str]]:
        """Its grants as plain data (project → sorted role names), for logs and ``WhoAmI``-like views."""
        return {p: sorted(r.value for r in roles) for p, roles in sorted(self.grants.items())}


# The single token (or client CA) of older setups: everything, everywhere (issue 32: nothing breaks).
ADMIN = Principal("admin", {EVERY_PROJECT: frozenset(Role)}, "token")
# Who acts when the server itself does something (no call): never a caller's name.
SERVER = Principal("server", {EVERY_PROJECT: frozenset(Role)}, "server")


# The principal of the call being served, set by the API layer around each handler, so that a
# control event can say who acted (``ControlEvent.actor``) without every command taking it.
acting: ContextVar[Principal | None] = ContextVar("acting", default=None)


def actor() -> str:
    """The name of whoever acts in the current call ("" outside a call, e.g. the server itself)."""
    principal = acting.get()
    return principal.name if principal is not None else ""

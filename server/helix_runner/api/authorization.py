"""The one permission check of every RPC, and the audit entry of every action (docs/tenancy.md).

``Authorization.check`` takes the method's ``Need`` (``api/routing.py`` PERMISSIONS), the request
and the caller's principal, and answers the project the call touches, or raises:

* ``NOT_FOUND`` when the call names a job of a project the caller may not see, or one that does
  not exist: to a caller confined to some projects both answer the same (status, reason, message),
  before the rest of the request is validated, so ids do not leak;
* ``PERMISSION_DENIED`` (``PERMISSION_DENIED``, with the role and project) when it may see the
  project but not do this there.

Listings (``ListJobs``) are filtered instead: ``visible`` says which projects a caller may see.
The check costs a dict lookup per call plus, for a job it has not seen, one store read (a job's
project never changes, so it is cached).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from helix_runner.api.routing import Need, Scope
from helix_runner.domain.access import Principal, Role
from helix_runner.domain.audit import MAX_DETAIL_BYTES, AuditEntry
from helix_runner.domain.phase_spec import DEFAULT_PROJECT
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.queries import job_not_found, phase_not_found

log = logging.getLogger("helix_runner.audit")

_JOB_CACHE = 65536


def method_adds_to_job(need: Need, request: Any) -> bool:
    """Whether the call starts a phase in a job it names (RunPhase)."""
    return need.scope is Scope.PROJECT and need.role is Role.OPERATOR and bool(getattr(request, "job_id", ""))


def permission_denied(principal: Principal, need: Need, project: str) -> RunnerError:
    where = "every project" if project == "*" else f"project {project}"
    return RunnerError(ErrorKind.PERMISSION_DENIED, "PERMISSION_DENIED",
                       f"{principal.name} may not do this: it needs the {need.role.value} role on {where}",
                       {"principal": principal.name, "role": need.role.value, "project_id": project})


class Authorization:
    """Checks calls against the principal's grants; records the actions in the audit trail."""

    def __init__(self, project_of: Callable[[str], str | None], webhook_project: Callable[[str], str | None],
                 append: Callable[[AuditEntry], None] | None = None):
        self._project_of = project_of
        self._webhook_project = webhook_project
        self._append = append
        self._jobs: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def job_project(self, job_id: str) -> str | None:
        with self._lock:
            project = self._jobs.get(job_id)
        if project is not None:
            return project
        project = self._project_of(job_id)
        if project is not None:
            with self._lock:
                self._jobs[job_id] = project
                if len(self._jobs) > _JOB_CACHE:
                    self._jobs.popitem(last=False)
        return project

    def check(self, need: Need, request: Any, principal: Principal) -> str:
        """The project the call touches ("*": every project), once the principal may do it there."""
        scope = need.scope
        if scope is Scope.SERVER:
            return self._require(principal, need, "*")
        if scope is Scope.LISTING:
            return "*"  # filtered by ``visible``
        if scope is Scope.PHASE or (scope is Scope.COSTS and request.job_id):
            return self._phase(need, request, principal)
        if scope is Scope.WEBHOOK:
            webhook_id = getattr(request, "webhook_id", "")
            if webhook_id:
                project = self._webhook_project(webhook_id)
                if project is None or not principal.may(Role.VIEWER, project):
                    return "*" if principal.everywhere(need.role) else self._missing_webhook(webhook_id)
                return self._require(principal, need, project)
            if getattr(request, "job_id", ""):
                return self._phase(need, request, principal)
            return self._require(principal, need, "*")
        project = request.project_id
        if not project:
            if scope is Scope.PROJECTS:
                return self._require(principal, need, "*")
            project = DEFAULT_PROJECT
        if method_adds_to_job(need, request):
            # A new phase of an existing job: the job's project is the one that counts.
            existing = self.job_project(request.job_id)
            if existing is not None and existing != project and not principal.may(Role.VIEWER, existing):
                raise job_not_found(request.job_id)
        return self._require(principal, need, project)

    def _phase(self, need: Need, request: Any, principal: Principal) -> str:
        job_id = request.job_id
        if not job_id:
            # The handler refuses a missing job_id (INVALID_ARGUMENT); an empty one names no project.
            return "*" if principal.everywhere(need.role) else self._require(principal, need, "*")
        project = self.job_project(job_id)
        if project is None and principal.everywhere(Role.VIEWER):
            return ""  # no such job: the handler answers as it always did
        if project is None or not principal.may(Role.VIEWER, project):
            # To a caller confined to some projects, a job it may not see and one that does not
            # exist get the same answer, before anything else about the request is looked at.
            phase_id = getattr(request, "phase_id", "")
            raise phase_not_found(job_id, phase_id) if phase_id else job_not_found(job_id)
        return self._require(principal, need, project)

    def touched(self, need: Need, request: Any) -> str:
        """The project a call named, for the audit entry of one that was refused ("" if none)."""
        job_id = getattr(request, "job_id", "")
        if job_id and need.scope in (Scope.PHASE, Scope.COSTS, Scope.WEBHOOK):
            return self.job_project(job_id) or ""
        if need.scope is Scope.WEBHOOK and getattr(request, "webhook_id", ""):
            return self._webhook_project(request.webhook_id) or ""
        if hasattr(request, "project_id"):
            return request.project_id or (DEFAULT_PROJECT if need.scope is Scope.PROJECT else "*")
        return "*"

    @staticmethod
    def _missing_webhook(webhook_id: str) -> str:
        raise RunnerError(ErrorKind.NOT_FOUND, "WEBHOOK_NOT_FOUND", f"webhook {webhook_id} does not exist",
                          {"webhook_id": webhook_id})

    @staticmethod
    def _require(principal: Principal, need: Need, project: str) -> str:
        allowed = need.allows(principal.everywhere if project == "*" else lambda role: principal.may(role, project))
        if not allowed:
            raise permission_denied(principal, need, project)
        return project

    @staticmethod
    def visible(principal: Principal) -> frozenset[str] | None:
        """The projects whose jobs a principal may list (None: every project)."""
        return None if principal.everywhere(Role.VIEWER) else principal.projects(Role.VIEWER)

    # -- the audit trail ---------------------------------------------------------------------------

    def record(self, method: str, request: Any, principal: Principal, project: str, outcome: str,
               peer: str) -> None:
        """Appends the audit entry of an action (a failure to write is logged, never the caller's)."""
        entry = AuditEntry(time.time_ns(), principal.name, principal.source, method, project,
                           getattr(request, "job_id", "") or "", getattr(request, "phase_id", "") or "",
                           _target(request), _detail(method, request), peer, outcome)
        log.info("audit", extra={"fields": {"principal": entry.principal, "action": method, "project_id": project,
                                            "job_id": entry.job_id, "phase_id": entry.phase_id,
                                            "target": entry.target, "outcome": outcome, "peer": peer}})
        if self._append is None:
            return
        try:
            self._append(entry)
        except Exception:
            log.exception("could not store an audit entry", extra={"fields": {"action": method}})


def _target(request: Any) -> str:
    for name in ("tool_use_id", "breakpoint_id", "webhook_id", "task_id", "name", "new_phase_id"):
        value = getattr(request, name, "")
        if isinstance(value, str) and value:
            return value
    return ""


def _detail(method: str, request: Any) -> str:
    """What was asked, in a few words; never a prompt, an injected text or a secret's value."""
    detail = ""
    if method == "ResolveToolCall":
        which = request.WhichOneof("decision") if hasattr(request, "WhichOneof") else None
        detail = which or "approve"
        if which == "deny" and request.deny.message:
            detail += f": {request.deny.message}"
    elif method == "CancelPhase":
        detail = getattr(request, "reason", "") or ""
    elif method in ("SetPhaseModel",):
        detail = request.model
    elif method == "CreateWebhook":
        detail = request.url
    elif method == "PutEgressSecret":
        detail = "hosts: " + ", ".join(request.hosts)
    elif method == "RunPhase":
        detail = request.working_dir
    return detail.encode()[:MAX_DETAIL_BYTES].decode(errors="ignore")

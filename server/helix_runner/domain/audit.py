"""One entry of the audit trail: an action taken through the API, who took it and how it ended.

Entries are append-only (the stores refuse to change or delete one) and kept longer than phases
(docs/tenancy.md); ``detail`` never holds a secret's value or a prompt, only what was asked.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_DETAIL_BYTES = 1024


@dataclass(frozen=True, slots=True)
class AuditEntry:
    time_ns: int
    principal: str
    principal_source: str
    action: str  # the RPC
    project_id: str
    job_id: str = ""
    phase_id: str = ""
    target: str = ""  # a tool_use_id, a webhook id, a secret's name, a breakpoint id
    detail: str = ""
    peer: str = ""
    outcome: str = "OK"  # or the status code's name and the ErrorInfo reason
    entry_id: int = 0  # given by the store

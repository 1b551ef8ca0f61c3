"""What the application layer needs from persistence: the ``Store`` protocol and its row types.

``SqliteStore`` (embedded) and ``PostgresStore`` (replicas) implement it; an in-memory test store fits
wherever the application (``phases/service``, ``phases/run``, ``phases/event_log``,
``phases/retention``) and the read model (``phases/queries``) take a ``Store``. Rows are plain data:
statuses are the domain enums, nested values (results, costs, events, tool calls) arrive already
encoded by the record encoder as protobuf bytes (the ``*_pb`` fields), so a store knows tables,
not events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Protocol

from helix_runner.domain.audit import AuditEntry
from helix_runner.domain.checkpoints import Checkpoint
from helix_runner.domain.phase_status import FINAL_STATUSES, PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.quotas import ProjectQuota, Spend
from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats

# Replica leases on a shared database (store/postgres_cluster.py; docs/scale-out.md, "Dead-replica
# takeover"): a replica renews its lease every third of it, and the others sweep every third of it,
# so a dead replica's phases are INTERRUPTED at most lease + lease / 3 after its last heartbeat. The
# issue's bound is 30 s, so the longest lease is 22.5 s; under 1 s a slow database (or a paused
# process) would cost live replicas their phases. Here, not there: a SQLite-only server's config
# reads them without loading the PostgreSQL driver.
DEFAULT_LEASE_SECONDS = 15.0
MIN_LEASE_SECONDS = 1.0
TAKEOVER_BOUND_SECONDS = 30.0
MAX_LEASE_SECONDS = TAKEOVER_BOUND_SECONDS * 3 / 4


def sweep_interval_seconds(lease_seconds: float) -> float:
    """How often replicas sweep for the phases of dead ones: every third of a lease."""
    return lease_seconds / 3


# Statuses from which a phase can still change; anything else is final.
ACTIVE_STATUSES: tuple[PhaseStatus, ...] = tuple(
    s for s in PhaseStatus if s is not PhaseStatus.UNSPECIFIED and s not in FINAL_STATUSES
)
# Tool-call statuses of a call that got its result (the others have no duration).
FINISHED_TOOL_STATUSES: tuple[ToolCallStatus, ...] = (ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED)


class StoreError(Exception):
    """The store cannot be opened or used (unwritable directory, corrupt file, newer schema)."""


class TranscriptGapError(StoreError):
    """The kept chunks of a transcript do not follow each other (a chunk is missing)."""


class AlreadyExistsError(StoreError):
    """A row with this key already exists."""


class StoreUnavailable(StoreError):
    """The database could not be reached while committing: nothing, or everything, was committed.

    The same writes may be committed again (``Committer.commit(..., retry=True)`` makes that safe).
    """


class FencedError(StoreError):
    """Writes for these phases were refused: this replica does not own them (any more).

    Either its fence is stale (another replica took the phase over), its own lease ran out, or
    another replica owns the phase and is alive. Writes for other phases in the same call were
    committed.
    """

    def __init__(self, refused: Sequence[tuple[str, str]]):
        self.refused = list(refused)
        names = ", ".join(f"{job}/{phase}" for job, phase in self.refused[:5])
        more = f" and {len(self.refused) - 5} more" if len(self.refused) > 5 else ""
        super().__init__(f"refused writes for phases this replica does not own: {names}{more}")


@dataclass
class JobRow:
    job_id: str
    project_id: str
    status: PhaseStatus
    create_time_ns: int
    update_time_ns: int
    # Bumped in the same transaction as every write that changes what the job's view shows, but
    # for appended events: the job row, a phase row (insert_phase, update_phase, a takeover's
    # sweep) and its per-model costs (replace_model_costs). Tool calls and recordings are not part
    # of the view.
    view_version: int = 0
    # The sum of its phases' last sequences, read with the row by get_job and list_jobs: every
    # appended event raises it (a phase's sequences only grow), so events need no write here. The
    # read model caches views under (create_time_ns, view_version, sequence_sum) (phases/queries.py):
    # a view is never served after a write to it commits, in this process or any other.
    sequence_sum: int = 0


@dataclass
class PhaseRow:
    job_id: str
    phase_id: str
    ordinal: int
    project_id: str
    status: PhaseStatus
    create_time_ns: int
    status_reason: str = ""
    start_time_ns: int | None = None
    end_time_ns: int | None = None
    session_id: str = ""
    model: str = ""
    working_dir: str = ""
    prompt: str = ""
    on_disconnect: str = "CANCEL"
    # Encoded helix.runner.v1.PhaseResult, PhaseCost, and a Phase holding only tool_stats.
    result_pb: bytes | None = None
    cost_pb: bytes | None = None
    tool_stats_pb: bytes | None = None
    recording_dir: str = ""
    reported_usd: float | None = None
    computed_usd: float = 0.0
    computed_only: int = 0
    pid: int | None = None
    pid_start_ticks: int | None = None
    # Encoded Phase holding only its ended attempts (Attempt records), written when each attempt
    # ends, so a phase recovered after a crash or swept after its replica died keeps them.
    attempts_pb: bytes | None = None
    # Encoded helix.runner.v1.ForkOrigin: the phase and checkpoint a forked phase started from.
    fork_pb: bytes | None = None
    # Derived on read (the phase's highest event sequence); never written.
    last_sequence: int = 0


@dataclass
class EventRow:
    sequence: int
    receive_time_ns: int
    kind: str
    body: bytes


@dataclass
class ToolCallRow:
    tool_use_id: str
    name: str
    status: ToolCallStatus
    start_sequence: int
    # Encoded helix.runner.v1.ToolCall; its status field may be stale (the column is authoritative).
    body: bytes
    phase_id: str = ""
    # Result receive time - start receive time, clamped at 0; None until the call finished.
    duration_ns: int | None = None
    # The phase's ordinal in its job (set on read; the paging key of a job's calls).
    phase_ordinal: int = 0


@dataclass
class ModelCostRow:
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_write_5m_input_tokens: int
    cache_write_1h_input_tokens: int
    web_search_requests: int
    reported_usd: float | None
    computed_usd: float
    pricing_source: PricingSource


# -- the credential vault (egress/vault.py, phases/egress_vault.py) ----------------------------------


@dataclass(frozen=True)
class EgressSecretRow:
    """A vault secret as stored: its binding in plain columns, its value sealed (AES-GCM)."""

    project_id: str
    name: str
    hosts: tuple[str, ...]  # host:port
    presentation: str  # header, bearer, basic
    header: str
    username: str
    key_id: str
    nonce: bytes
    ciphertext: bytes
    create_time_ns: int


# -- webhooks (issue 26; domain/webhooks.py, phases/webhook_*.py) ------------------------------------

# A delivery's state: PENDING until it is delivered, given up (DEAD: the last try failed, or its
# subscription was disabled) or CANCELLED (its subscription was deleted).
DELIVERY_STATES = ("PENDING", "DELIVERED", "DEAD", "CANCELLED")


@dataclass
class WebhookRow:
    """A webhook subscription as stored: its filters by their names, its secret as given."""

    subscription_id: str
    project_id: str  # "" = every project
    url: str
    secret: str  # whsec_...; written, read by the dispatcher, never returned by the API
    events: tuple[str, ...]  # WebhookEvent values
    statuses: tuple[str, ...]  # PhaseStatus names (phase.finished / job.finished filter; empty = any)
    cost_threshold_usd: float | None
    format: str  # WebhookFormat value
    description: str
    source: str  # "api" or "config" (the config file's subscriptions are replaced at each start)
    create_time_ns: int
    disabled_reason: str = ""
    disabled_time_ns: int | None = None


@dataclass
class OutboxRow:
    """A notification to deliver to one subscription, written with the state change that caused it.

    ``delivery_id`` is the ``webhook-id`` every attempt sends (the receiver's idempotency key);
    ``sequence`` the phase's event sequence of the cause (0: no event, e.g. queue.full).
    """

    delivery_id: str
    subscription_id: str
    event_type: str
    job_id: str
    phase_id: str
    sequence: int
    body: bytes
    create_time_ns: int


@dataclass
class WebhookDeliveryRow:
    """A delivery with its state (``DELIVERY_STATES``); ``order`` is its place in the outbox (insertion order)."""

    order: int
    delivery_id: str
    subscription_id: str
    event_type: str
    job_id: str
    phase_id: str
    sequence: int
    body: bytes
    create_time_ns: int
    state: str
    attempts: int
    next_attempt_ns: int
    last_status_code: int | None
    last_error: str
    end_time_ns: int | None


@dataclass
class WebhookAttemptRow:
    """One try of a delivery: when, what the receiver answered (None: no answer), how long it took."""

    delivery_id: str
    attempt: int
    time_ns: int
    status_code: int | None
    latency_ns: int
    error: str
    replica_id: str = ""


@dataclass(frozen=True)
class PhaseCostSums:
    """Cost columns of the phases in a scope, summed (``reported_usd``: phases without one add 0)."""

    phase_count: int = 0
    reported_usd: float = 0.0
    computed_usd: float = 0.0
    computed_only_phase_count: int = 0


# -- a phase run's writes, as data -------------------------------------------------------------------
# What a running phase writes goes to the store as these records, queued in the order the run made
# them (phases/event_log.EventWriter) and committed in batches, each batch one transaction
# (``Store.write_phases``, ``Committer.commit``). A row that must commit together with a phase's
# change is one more record here, with its statement in ``SqlStore`` (``_APPLY``): handed to the
# writer with the change, it lands in the same transaction, never an earlier one, and is refused
# with its phase. The webhook outbox is one (``InsertOutbox``, issue 26).


@dataclass(frozen=True, slots=True)
class AppendEvents:
    """Events of one phase, their sequences continuing what it has."""

    job_id: str
    phase_id: str
    rows: Sequence[EventRow]


@dataclass(frozen=True, slots=True)
class UpdatePhase:
    """``Store.update_phase``: PhaseRow columns of one phase (a status change also the job's)."""

    job_id: str
    phase_id: str
    now_ns: int
    values: Mapping[str, object]

    def __post_init__(self) -> None:
        unknown = set(self.values) - _PHASE_FIELDS
        if unknown:
            raise ValueError(f"unknown phase columns: {sorted(unknown)}")


@dataclass(frozen=True, slots=True)
class UpsertToolCalls:
    """``Store.upsert_tool_calls`` of one phase."""

    job_id: str
    phase_id: str
    calls: Sequence[ToolCallRow]


@dataclass(frozen=True, slots=True)
class ReplaceModelCosts:
    """``Store.replace_model_costs`` of one phase."""

    job_id: str
    phase_id: str
    project_id: str
    rows: Sequence[ModelCostRow]


@dataclass(frozen=True, slots=True)
class InsertOutbox:
    """Webhook deliveries one phase's events cause (``OutboxRow``s of that phase), committed with
    those events. Idempotent: a delivery id already stored is skipped (a batch sent again after a
    lost connection must not queue a delivery twice)."""

    job_id: str
    phase_id: str
    rows: Sequence[OutboxRow]


@dataclass(frozen=True, slots=True)
class InsertCheckpoint:
    """One checkpoint of a phase (docs/fork-and-rewind.md), committed after the events it follows."""

    job_id: str
    phase_id: str
    checkpoint: Checkpoint


@dataclass(frozen=True, slots=True)
class MarkRewound:
    """A rewind in place: the phase's checkpoints after ``after_number`` are marked rewound (they stay)."""

    job_id: str
    phase_id: str
    after_number: int


@dataclass(frozen=True, slots=True)
class AppendTranscript:
    """Bytes of a phase's CLI session transcript from ``offset`` (append-only; a fork resumes from it).
    ``offset`` 0 with ``restart``: the file was rewritten, the session's earlier bytes go."""

    job_id: str
    phase_id: str
    session_id: str
    offset: int
    data: bytes
    restart: bool = False


@dataclass(frozen=True, slots=True)
class SaveRequest:
    """The phase's accepted request (an encoded RunPhaseRequest), which a fork of it starts from."""

    job_id: str
    phase_id: str
    request_pb: bytes


PhaseWrite = (AppendEvents | UpdatePhase | UpsertToolCalls | ReplaceModelCosts | InsertOutbox | InsertCheckpoint
              | MarkRewound | AppendTranscript | SaveRequest)
# The columns a write may set: PhaseRow's fields but last_sequence (derived on read, never written).
_PHASE_FIELDS = frozenset(f.name for f in fields(PhaseRow)) - {"last_sequence"}


class Committer(Protocol):
    """Commits batches of phase writes for one writer, each batch one transaction.

    ``off_loop`` says where a commit should run: False when it costs the caller's CPU (SQLite: a
    commit is a few microseconds of work, holding the GIL), True when it mostly waits for the
    database (PostgreSQL: a network round trip; a thread of its own overlaps it with the event loop).
    """

    off_loop: bool

    def commit(self, writes: Sequence[PhaseWrite], *, retry: bool = False) -> set[tuple[str, str]]:
        """Applies ``writes`` in order, in one transaction; returns the phases refused (fenced).

        A refused phase has none of its writes applied; the others are committed. An
        ``UpdatePhase`` of a phase that does not exist is dropped (as ``Store.update_phase``); any
        other write of one refuses it. ``retry``: these writes may have been committed already
        (after ``StoreUnavailable``); applying them again changes nothing. Raises
        ``StoreUnavailable`` when the database cannot be reached, another ``StoreError`` or the
        driver's error when it refuses the writes.
        """
        ...

    def close(self) -> None: ...


class Store(Protocol):
    """Persistence of jobs, phases, events, tool calls and costs, as the application uses it.

    Every method is synchronous and atomic on its own; ``append_events`` commits before it
    returns (watchers are offered only committed events).
    """

    migrated_from: int | None
    """The schema version the database had when this open migrated it; None: new or current."""

    def close(self) -> None: ...

    def backfill_tool_call_durations(self, duration_of: Callable[[bytes], int | None], batch: int = 1000) -> int:
        """Once after the migration that added tool-call durations: fills in those only the encoded
        bodies hold (``duration_of`` decodes one); returns how many, 0 once done."""
        ...

    # -- jobs -------------------------------------------------------------------------------

    def get_or_create_job(self, job_id: str, project_id: str, now_ns: int) -> tuple[JobRow, bool]:
        """The job, created (status PENDING) on first use; the bool says whether it was created."""
        ...

    def get_job(self, job_id: str) -> JobRow | None: ...

    def list_jobs(
        self,
        project_id: str | Sequence[str] | None,
        statuses: Sequence[PhaseStatus],
        limit: int,
        after: tuple[int, str] | None = None,
    ) -> list[JobRow]:
        """Jobs newest first (create time, then job id, descending), of one project, of several (a sequence:
        the projects a caller may see) or of all (None); ``after`` is the previous page's last key."""
        ...

    # -- phases -----------------------------------------------------------------------------

    def insert_phase(self, row: PhaseRow) -> PhaseRow:
        """Inserts a phase, assigning its ordinal; the job takes its status. AlreadyExistsError if it exists."""
        ...

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None:
        """Sets PhaseRow fields; a status change becomes the job's status when this is its latest phase."""
        ...

    def get_phase(self, job_id: str, phase_id: str) -> PhaseRow | None: ...

    def phases_of_jobs(self, job_ids: Sequence[str]) -> list[PhaseRow]:
        """The phases of all these jobs in one query, by job then ordinal."""
        ...

    def active_phases(self) -> list[PhaseRow]:
        """Phases in an ``ACTIVE_STATUSES`` status (after a crash: the ones to mark INTERRUPTED)."""
        ...

    # -- events -----------------------------------------------------------------------------

    def append_events(self, batches: Sequence[tuple[str, str, Sequence[EventRow]]],
                      outbox: Sequence[OutboxRow] = ()) -> None:
        """Appends (job_id, phase_id, events) batches of one or more phases in one transaction.

        ``outbox``: webhook deliveries the events cause, written in the same transaction (a row
        of a phase whose events are refused by the fence is left out with them).
        """
        ...

    def write_phases(self, writes: Sequence[PhaseWrite]) -> set[tuple[str, str]]:
        """A running phase's writes (of one or more phases) in one transaction, in order; returns
        the refused phases, as ``Committer.commit``."""
        ...

    def committer(self) -> Committer:
        """What commits a writer's batches (``phases/event_log.EventWriter``): on this store's own
        connection (SQLite), or on a connection of its own (PostgreSQL). Closed with the store."""
        ...

    def read_events(self, job_id: str, phase_id: str, after_sequence: int, limit: int) -> list[EventRow]: ...

    # -- tool calls -------------------------------------------------------------------------

    def upsert_tool_calls(self, job_id: str, phase_id: str, calls: Iterable[ToolCallRow]) -> None: ...

    def mark_tool_calls_unfinished(self, job_id: str, phase_id: str) -> int:
        """After a crash: RUNNING or HELD calls become UNFINISHED; returns how many."""
        ...

    def list_tool_calls(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        statuses: Sequence[ToolCallStatus],
        limit: int,
        after: tuple[int, int, str] | None = None,
    ) -> list[ToolCallRow]:
        """Calls by (phase ordinal, start sequence, tool_use_id); ``after`` is the previous page's last key."""
        ...

    def tool_call_stats(
        self,
        job_id: str,
        phase_id: str | None,
        tool_name: str | None,
        statuses: Sequence[ToolCallStatus],
    ) -> list[ToolStats]:
        """Per-tool statistics of every matching call, by ``tool_tracker.summarize_calls``' rules.

        Computed by the database, never by reading the calls out: count, failures, unfinished
        (neither SUCCEEDED nor FAILED), total and mean (floor) of finished calls' durations, and
        their nearest-rank 95th percentile (the ceil(0.95 n)-th smallest), exact at any count.
        """
        ...

    # -- costs ------------------------------------------------------------------------------

    def replace_model_costs(
        self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]
    ) -> None:
        """Replaces a phase's per-model cost rows (costs are snapshots, never added up)."""
        ...

    def phase_cost_sums(
        self, *, project_id: str | None = None, job_id: str | None = None, phase_id: str | None = None
    ) -> PhaseCostSums:
        """The summed cost columns of a project's, a job's, or one phase's (job + phase) phases."""
        ...

    def model_cost_sums(
        self, *, project_id: str | None = None, job_ids: Sequence[str] = (), phase_id: str | None = None
    ) -> list[tuple[str, ModelCostRow]]:
        """Per-model cost rows summed per (job, model, pricing source) over a scope.

        Scope: ``job_ids`` (optionally one ``phase_id`` of them), else ``project_id``. The job id
        of each row is set when the scope is ``job_ids`` and empty for a project (one row per
        model and source). ``reported_usd`` is None when no summed row had one.
        """
        ...

    # -- checkpoints (docs/fork-and-rewind.md) -------------------------------------------------

    def save_phase_request(self, job_id: str, phase_id: str, request_pb: bytes) -> None:
        """Keeps the phase's accepted request (encoded RunPhaseRequest): a fork starts from it."""
        ...

    def get_phase_request(self, job_id: str, phase_id: str) -> bytes | None:
        """The phase's accepted request, or None (a phase from before forks were built)."""
        ...

    def list_checkpoints(self, job_id: str, phase_id: str) -> list[Checkpoint]:
        """The phase's checkpoints in number order (rewound ones included, marked)."""
        ...

    def read_transcript(self, job_id: str, phase_id: str, session_id: str) -> bytes:
        """The phase's copy of a CLI session transcript (chunks joined; b"" when none was kept).
        ``TranscriptGapError`` when a chunk is missing."""
        ...

    # -- retention --------------------------------------------------------------------------

    def expired_jobs(self, cutoff_ns: int, limit: int) -> list[tuple[str, list[str]]]:
        """Jobs untouched since ``cutoff_ns`` with no active phase, oldest first: (job_id, recording dirs)."""
        ...

    def delete_jobs(self, job_ids: Sequence[str]) -> int:
        """Deletes jobs with everything they have, in one transaction; returns the phases deleted."""
        ...

    def finished_recordings(self) -> list[tuple[str, str, str]]:
        """(job_id, phase_id, recording_dir) of finished phases that still have one, oldest end first."""
        ...

    def forget_recording(self, job_id: str, phase_id: str) -> None:
        """Notes that a phase's recording was deleted (not activity on its job)."""
        ...

    def referenced_recordings(self, recording_dirs: Sequence[str]) -> set[str]:
        """Those of ``recording_dirs`` some phase row still names (retention's orphan check)."""
        ...

    # -- per-project quotas ----------------------------------------------------------------------

    def put_quota(self, quota: ProjectQuota) -> None:
        """Sets a project's quota, replacing the one it had."""
        ...

    def get_quota(self, project_id: str) -> ProjectQuota | None:
        """The project's quota (None: it has none)."""
        ...

    def project_spend(self, project_id: str, day_start_ns: int, month_start_ns: int) -> Spend:
        """What the project's phases created since each start cost (the cost totals' ledger)."""
        ...

    # -- egress allowances (held requests approved for a project) ------------------------------

    def add_egress_allowance(self, project_id: str, host: str, created_by: str, now_ns: int) -> None:
        """Lets the project's phases reach ``host`` (host:port); kept when it exists already."""
        ...

    def list_egress_allowances(self, project_id: str) -> list[tuple[str, str, str, int]]:
        """The project's allowances by host: (project_id, host, created_by, create_time_ns)."""
        ...

    def delete_egress_allowance(self, project_id: str, host: str) -> bool:
        """Removes one; False if the project has none for that host."""
        ...

    # -- the audit trail -------------------------------------------------------------------------

    def append_audit(self, entry: AuditEntry) -> None:
        """Appends an entry (entries are never changed or deleted)."""
        ...

    def list_audit(self, projects: Sequence[str] | None, job_id: str, principal: str, limit: int,
                   before_id: int | None) -> list[AuditEntry]:
        """Entries newest first, of these projects (None: every one), filtered by job and principal."""
        ...

    # -- the credential vault ------------------------------------------------------------------

    def put_egress_secret(self, row: EgressSecretRow, max_per_project: int) -> bool:
        """Stores a secret, replacing the project's one of that name; False (nothing written) when the
        project has ``max_per_project`` others already."""
        ...

    def list_egress_secrets(self, project_id: str) -> list[EgressSecretRow]:
        """The project's secrets by name."""
        ...

    def delete_egress_secret(self, project_id: str, name: str) -> bool:
        """Deletes a secret; False if the project has none of that name."""
        ...

    # -- webhooks ---------------------------------------------------------------------------

    def create_webhook(self, row: WebhookRow) -> None:
        """Adds a subscription; AlreadyExistsError if its id is taken."""
        ...

    def get_webhook(self, subscription_id: str) -> WebhookRow | None: ...

    def list_webhooks(self, project_id: str | None = None) -> list[WebhookRow]:
        """Subscriptions by creation time; ``project_id`` given: that project's and the server-wide ones."""
        ...

    def delete_webhook(self, subscription_id: str, now_ns: int) -> int | None:
        """Deletes a subscription and cancels its pending deliveries (how many); None if it did not exist."""
        ...

    def replace_config_webhooks(self, rows: Sequence[WebhookRow]) -> None:
        """Makes the config file's subscriptions (``source`` "config") exactly ``rows``; a kept one stays
        disabled unless its URL or secret changed."""
        ...

    def enqueue_webhooks(self, rows: Sequence[OutboxRow]) -> None:
        """Writes deliveries that no event carries (queue.full) in a transaction of their own."""
        ...

    def claim_webhook_deliveries(self, owner: str, limit: int, lease_s: float) -> list[WebhookDeliveryRow]:
        """Up to ``limit`` due deliveries, claimed for ``owner`` for ``lease_s`` seconds.

        A delivery is due when it is PENDING, its next attempt time has come, no live claim holds
        it, and no earlier PENDING delivery of the same subscription and phase exists (one phase's
        deliveries go out in order). Replicas claiming at once never get the same delivery.
        """
        ...

    def finish_webhook_attempt(self, owner: str, attempt: WebhookAttemptRow, state: str,
                               retry_in_s: float | None, disable_reason: str = "") -> bool:
        """Records an attempt of a delivery ``owner`` claimed and releases the claim.

        ``state``: the delivery's new state; PENDING with ``retry_in_s`` schedules the next try.
        ``disable_reason``: the subscription is disabled too and its other PENDING deliveries end
        DEAD. False when the claim was lost meanwhile (the attempt is still recorded).
        """
        ...

    def release_webhook_claims(self, owner: str) -> int:
        """Releases every claim ``owner`` holds (a restart under the same name); how many."""
        ...

    def next_webhook_due_s(self) -> float | None:
        """Seconds until the earliest PENDING delivery is due (0 or less: now), None when none is pending."""
        ...

    def list_webhook_deliveries(self, subscription_id: str | None, job_id: str | None, phase_id: str | None,
                                states: Sequence[str], limit: int, before: int | None = None
                                ) -> list[WebhookDeliveryRow]:
        """Deliveries newest first; ``before`` is the previous page's last ``order``."""
        ...

    def webhook_attempts(self, delivery_ids: Sequence[str]) -> list[WebhookAttemptRow]:
        """The attempts of these deliveries, by delivery, oldest first."""
        ...

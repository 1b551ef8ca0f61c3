"""What a phase needs to outlive its replica, kept in PostgreSQL (issue 24; docs/scale-out.md "Hand-over").

The owner saves the phase's request, its job control state, its session id and workspace
(``save``), and mirrors the CLI's transcript as append-only chunks (``mirror_transcript``), every
write fenced like the phase's history. A draining owner ``release``s the phase (no owner, a new
fence, who and why); any live replica ``claim``s released phases, and the phases of dead owners
that can move, under a new fence of its own, and continues them as a new attempt. Decisions on held
calls sent while nobody owns the phase wait in ``phase_decisions`` until the adopter ``take``s
them, each once. The values are opaque bytes: the phases layer encodes them (phases/handover.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from psycopg_pool import ConnectionPool

from helix_runner.store.cluster import HandoverClaim, HandoverState
from helix_runner.store.postgres_admission import ADMISSION_CHANNEL
from helix_runner.store.protocol import FencedError, StoreError

log = logging.getLogger(__name__)

# The admission channel's payload when a phase was released for another replica to claim.
HANDOVER_WAKEUP = "handover"

# The fence a handle keeps for a phase it let go: no row has it (phase_fence starts at 1).
NO_FENCE = -1

# Transcript chunks are written in pieces of at most this many bytes (one row each).
CHUNK_BYTES = 1 << 20

_STATE_COLUMNS = ("request", "control", "session_id", "workspace", "movable", "not_movable_reason")


class TranscriptGapError(StoreError):
    """The mirrored chunks of a transcript do not follow each other (a chunk is missing)."""


class PostgresHandover:
    """The ``PhaseHandover`` port on PostgreSQL, for one replica (its membership holds its fences)."""

    def __init__(self, pool: ConnectionPool, membership, active_statuses: Sequence[str]):
        self._pool = pool
        self._replica = membership
        self._active = list(active_statuses)

    # -- the owner -------------------------------------------------------------------------------

    def save(self, job_id: str, phase_id: str, **values: object) -> None:
        """Inserts or updates the phase's hand-over state (columns of ``_STATE_COLUMNS``); fenced."""
        unknown = set(values) - set(_STATE_COLUMNS)
        if unknown:
            raise ValueError(f"unknown hand-over columns: {sorted(unknown)}")
        if not values:
            return
        names = list(values)
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._replica.require_writable(cur, job_id, phase_id)
            exists = cur.execute(
                "SELECT 1 FROM phase_handover WHERE job_id = %s AND phase_id = %s", (job_id, phase_id)
            ).fetchone()
            if exists:
                sets = ", ".join(f"{n} = %s" for n in names)
                cur.execute(f"UPDATE phase_handover SET {sets} WHERE job_id = %s AND phase_id = %s",
                            [*values.values(), job_id, phase_id])
            else:
                if "request" not in values:
                    raise ValueError("the first save of a phase's hand-over state must carry its request")
                cols = ", ".join(names)
                marks = ", ".join(["%s"] * len(names))
                cur.execute(f"INSERT INTO phase_handover (job_id, phase_id, {cols}) VALUES (%s, %s, {marks})",
                            [job_id, phase_id, *values.values()])

    def mirror_transcript(self, job_id: str, phase_id: str, session_id: str, offset: int, data: bytes) -> None:
        """Appends ``data`` (the transcript's bytes from ``offset``) as chunks; fenced. A chunk already
        mirrored at an offset is kept (a repeated mirror after a failed commit writes it once)."""
        if not data:
            return
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._replica.require_writable(cur, job_id, phase_id)
            rows = [(job_id, phase_id, session_id, offset + start, data[start:start + CHUNK_BYTES])
                    for start in range(0, len(data), CHUNK_BYTES)]
            cur.executemany(
                "INSERT INTO phase_transcripts (job_id, phase_id, session_id, start_offset, data) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING", rows)

    def drop_transcript(self, job_id: str, phase_id: str, session_id: str) -> None:
        """Forgets a session's mirrored chunks (the file was rewritten, not appended to); fenced."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._replica.require_writable(cur, job_id, phase_id)
            cur.execute("DELETE FROM phase_transcripts WHERE job_id = %s AND phase_id = %s AND session_id = %s",
                        (job_id, phase_id, session_id))

    def release(self, job_id: str, phase_id: str, reason: str) -> bool:
        """Hands the phase over: no owner, a new fence (this replica's writes are refused from now on),
        who released it and why; other replicas are woken to claim it. False if this replica did not
        hold the phase any more (taken over meanwhile) or it has no hand-over state."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            try:
                self._replica.require_writable(cur, job_id, phase_id)
            except FencedError:
                return False
            done = cur.execute(
                "UPDATE phase_handover SET released_by = %s, released_reason = %s, released_at = now() "
                "WHERE job_id = %s AND phase_id = %s AND movable",
                (self._replica.replica_id, reason, job_id, phase_id)).rowcount
            if not done:
                return False
            cur.execute("UPDATE phases SET owner_id = NULL, fence = nextval('phase_fence') "
                        "WHERE job_id = %s AND phase_id = %s", (job_id, phase_id))
            # Wakes every replica's admission listener: one with room claims the phase at once.
            cur.execute("SELECT pg_notify(%s, %s)", (ADMISSION_CHANNEL, HANDOVER_WAKEUP))
        self._refuse_from_now_on(job_id, phase_id)
        return True

    # -- the adopter -----------------------------------------------------------------------------

    def claim(self, limit: int) -> list[HandoverClaim]:
        """Takes up to ``limit`` phases that can move and have no live owner (released by a draining
        replica, or their owner's lease ran out): this replica owns each under a new fence."""
        if limit <= 0:
            return []
        adopted = self._replica.adopted()  # a previous incarnation's, under a stable replica id
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._replica.ensure_live(conn)
            rows = cur.execute(
                "SELECT p.job_id, p.phase_id, p.owner_id, p.status, h.request, h.control, h.session_id, "
                "h.workspace, h.released_by, h.released_reason, h.moves "
                "FROM phases p JOIN phase_handover h ON h.job_id = p.job_id AND h.phase_id = p.phase_id "
                "WHERE p.status = ANY(%s) AND h.movable AND (p.owner_id IS NULL OR NOT EXISTS "
                "(SELECT 1 FROM replicas r WHERE r.replica_id = p.owner_id AND r.lease_expires_at > now()) "
                "OR (p.owner_id = %s AND p.fence = ANY(%s::bigint[]))) "
                "ORDER BY h.released_at NULLS LAST, p.create_time_ns LIMIT %s FOR UPDATE OF p SKIP LOCKED",
                (self._active, self._replica.replica_id, list(adopted.values()), limit)).fetchall()
            claims = []
            for (job_id, phase_id, owner, status, request, control, session_id, workspace, released_by,
                 released_reason, moves) in rows:
                (fence,) = cur.execute(
                    "UPDATE phases SET owner_id = %s, fence = nextval('phase_fence') "
                    "WHERE job_id = %s AND phase_id = %s RETURNING fence",
                    (self._replica.replica_id, job_id, phase_id)).fetchone()
                cur.execute("UPDATE phase_handover SET moves = moves + 1, released_by = NULL, released_reason = '', "
                            "released_at = NULL WHERE job_id = %s AND phase_id = %s", (job_id, phase_id))
                self._replica.hold(job_id, phase_id, fence)
                claims.append(HandoverClaim(
                    state=HandoverState(job_id, phase_id, bytes(request), bytes(control), session_id,
                                        bytes(workspace)),
                    status=status, from_replica=released_by or owner or "", drained=released_by is not None,
                    reason=released_reason, fence=fence, moves=moves + 1))
        self._replica.forget_adopted((c.state.job_id, c.state.phase_id) for c in claims)
        return claims

    def forget(self, job_id: str, phase_id: str) -> None:
        """The phase ended: its hand-over state goes (its job's deletion would take it too). Its mirrored
        transcript stays, for forks of its checkpoints (docs/fork-and-rewind.md): retention deletes it
        with the phase. Not fenced: only a final phase's rows are deleted."""
        with self._pool.connection() as conn, conn.transaction():
            final = conn.execute("SELECT 1 FROM phases WHERE job_id = %s AND phase_id = %s AND NOT status = ANY(%s)",
                                 (job_id, phase_id, self._active)).fetchone()
            if final is None:
                return
            for table in ("phase_decisions", "phase_handover"):
                conn.execute(f"DELETE FROM {table} WHERE job_id = %s AND phase_id = %s", (job_id, phase_id))

    def give_up(self, job_id: str, phase_id: str, why: str) -> None:
        """A claimed phase cannot continue here (``why``): it stays unmovable and ownerless, so the
        next sweep ends it INTERRUPTED with ``why`` as its reason."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._replica.require_writable(cur, job_id, phase_id)
            cur.execute("UPDATE phase_handover SET movable = false, not_movable_reason = %s "
                        "WHERE job_id = %s AND phase_id = %s", (why, job_id, phase_id))
            cur.execute("UPDATE phases SET owner_id = NULL, fence = nextval('phase_fence') "
                        "WHERE job_id = %s AND phase_id = %s", (job_id, phase_id))
        self._refuse_from_now_on(job_id, phase_id)

    def _refuse_from_now_on(self, job_id: str, phase_id: str) -> None:
        # A handle without a fence may write an ownerless phase (a swept one); this one let it go, so
        # it keeps a fence no row ever has and its late writes (a run winding down) are refused.
        self._replica.hold(job_id, phase_id, NO_FENCE)

    def transcript(self, job_id: str, phase_id: str, session_id: str) -> bytes:
        """The mirrored transcript, chunks joined in order; TranscriptGapError if one is missing."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT start_offset, data FROM phase_transcripts WHERE job_id = %s AND phase_id = %s "
                "AND session_id = %s ORDER BY start_offset", (job_id, phase_id, session_id)).fetchall()
        out = bytearray()
        for offset, data in rows:
            if offset != len(out):
                raise TranscriptGapError(
                    f"transcript {session_id} of {job_id}/{phase_id}: chunk at {offset}, expected {len(out)}")
            out += data
        return bytes(out)

    def state(self, job_id: str, phase_id: str) -> HandoverState | None:
        with self._pool.connection() as conn:
            r = conn.execute(
                "SELECT request, control, session_id, workspace, movable, not_movable_reason FROM phase_handover "
                "WHERE job_id = %s AND phase_id = %s", (job_id, phase_id)).fetchone()
        if r is None:
            return None
        return HandoverState(job_id, phase_id, bytes(r[0]), bytes(r[1]), r[2], bytes(r[3]), r[4], r[5])

    # -- decisions on held calls -------------------------------------------------------------------

    def record_decision(self, job_id: str, phase_id: str, tool_use_id: str, decision: bytes) -> str:
        """Keeps a decision sent while the phase has no live owner (it is moving). Returns "recorded",
        "duplicate" (one was kept for that call already: the first stands, as on a live owner),
        "owned" (the phase has a live owner now: send the decision there) or "gone" (no such active
        phase, or one that cannot move). The phase row is locked ``FOR SHARE``, so a claim (which
        updates it) commits before this looks or waits until this committed, and the adopter,
        which takes the decisions after its claim, sees every one recorded."""
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            row = cur.execute(
                "SELECT p.status = ANY(%s) AND h.movable, "
                "EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = p.owner_id AND r.lease_expires_at > now()) "
                "FROM phases p JOIN phase_handover h ON h.job_id = p.job_id AND h.phase_id = p.phase_id "
                "WHERE p.job_id = %s AND p.phase_id = %s FOR SHARE OF p", (self._active, job_id, phase_id)).fetchone()
            if row is None or not row[0]:
                return "gone"
            if row[1]:
                return "owned"
            done = cur.execute(
                "INSERT INTO phase_decisions (job_id, phase_id, tool_use_id, decision) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING", (job_id, phase_id, tool_use_id, decision)).rowcount
            return "recorded" if done else "duplicate"

    def take_decisions(self, job_id: str, phase_id: str) -> dict[str, bytes]:
        """The decisions kept for the phase, deleted as they are read (each is applied once); only by
        its owner (FencedError otherwise: a replica without the phase must not consume them)."""
        if self._replica.held_fence(job_id, phase_id) in (None, NO_FENCE):
            raise FencedError([(job_id, phase_id)])
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            self._replica.require_writable(cur, job_id, phase_id)
            rows = cur.execute("DELETE FROM phase_decisions WHERE job_id = %s AND phase_id = %s "
                               "RETURNING tool_use_id, decision", (job_id, phase_id)).fetchall()
        return {tool_use_id: bytes(decision) for tool_use_id, decision in rows}

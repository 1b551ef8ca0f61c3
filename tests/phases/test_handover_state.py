"""The hand-over's durable state as bytes (phases/handover.py): what another replica decodes to continue a phase."""

from __future__ import annotations

from pathlib import Path

import pytest

from helix_runner.api.handover_codec import ProtoHandoverCodec, request_to_proto
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.errors import RunnerError
from helix_runner.phases import handover as h

CODEC = ProtoHandoverCodec()


def test_the_request_round_trips_with_its_attempts(tmp_path: Path):
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="proj", prompt="do it", working_dir=str(tmp_path),
                            env={"A": "1"}, allowed_tools=("Bash",), max_budget_usd=2.5)
    attempt = Attempt(number=1, status=PhaseStatus.INTERRUPTED, end_kind=AttemptEndKind.MOVED, replica_id="r-a",
                      session_id="s-1", first_sequence=1, last_sequence=9)
    saved = h.SavedRequest(spec, RetryPolicy(max_attempts=5), 123, (attempt,))
    back = CODEC.decode_request(CODEC.encode_request(saved))
    assert back == saved
    assert dict(back.spec.env) == {"A": "1"} and back.attempts[0].end_kind is AttemptEndKind.MOVED


def test_a_stored_request_is_validated_again(tmp_path: Path):
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="x", working_dir=str(tmp_path))
    msg = request_to_proto(h.SavedRequest(spec, RetryPolicy(), 1))
    msg.request.job_id = "../x"
    with pytest.raises(RunnerError, match="job_id"):
        CODEC.decode_request(msg.SerializeToString())
    legacy = h.encode_legacy_request(h.SavedRequest(spec, RetryPolicy(), 1)).replace(b'"job_id":"j"', b'"job_id":"../x"')
    with pytest.raises(RunnerError):
        CODEC.decode_request(legacy)


def test_breakpoints_keep_their_hit_counts_and_are_compiled_again():
    bp = Breakpoint.create(kind=BreakpointKind.INPUT_PATTERN, breakpoint_id="b1", regex="rm -rf", once=True)
    bp.hit_count = 2
    control = h.SavedControl((h.saved_breakpoint(bp),), pause_requested=True, step_credits=3,
                             held=(h.HeldCallRecord("toolu_1", "Bash", '{"command":"ls"}', "b1"),))
    back = h.decode_control(h.encode_control(control))
    assert back == control
    restored = h.restored_breakpoint(back.breakpoints[0])
    assert (restored.regex, restored.once, restored.hit_count) == ("rm -rf", True, 2)
    assert h.decode_control(b"") == h.SavedControl()


def test_a_workspace_moves_only_from_a_root_marked_shared(tmp_path: Path):
    shared, local = tmp_path / "shared", tmp_path / "local"
    for root in (shared, local):
        (root / "w").mkdir(parents=True)
    (shared / h.SHARED_MARKER).write_text("")
    roots = (shared, local)
    assert h.movability("IN_PLACE", shared / "w", None, "", roots).movable
    here = h.movability("IN_PLACE", local / "w", None, "", roots)
    assert not here.movable and "marked shared" in here.why_not and str(local / "w") in here.why_not
    # A worktree moves with its repository (the branch holds the work in progress).
    assert h.movability("GIT_WORKTREE", local / "w", shared / "w", "helix/j/p", roots).movable
    assert not h.movability("GIT_WORKTREE", shared / "w", local / "w", "helix/j/p", roots).movable


class FakeHandover:
    def __init__(self):
        self.chunks: list[tuple[int, bytes]] = []
        self.dropped = 0

    def mirror_transcript(self, job_id, phase_id, session_id, offset, data):
        self.chunks.append((offset, data))

    def drop_transcript(self, job_id, phase_id, session_id):
        self.chunks.clear()
        self.dropped += 1


def test_the_mirror_copies_whole_new_lines_and_a_rewritten_file_again(tmp_path: Path):
    path = h.transcript_path({"CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")}, Path("/w/x.y"), "s-1")
    assert path == tmp_path / "cfg" / "projects" / "-w-x-y" / "s-1.jsonl"
    store = FakeHandover()
    mirror = h.TranscriptMirror(store, "j", "p")
    assert mirror.mirror(path, "s-1") == 0  # not written yet
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"a":1}\n{"b":')  # the second line is being written
    assert mirror.mirror(path, "s-1") == 8
    with open(path, "ab") as f:
        f.write(b'2}\n')
    mirror.mirror(path, "s-1")
    assert b"".join(d for _, d in store.chunks) == path.read_bytes()
    assert [o for o, _ in store.chunks] == [0, 8]
    path.write_bytes(b'{"c":3}\n')  # rewritten shorter
    mirror.mirror(path, "s-1")
    assert store.dropped == 1 and store.chunks == [(0, b'{"c":3}\n')]


def test_the_mirror_reads_a_huge_transcript_a_chunk_at_a_time(tmp_path: Path, monkeypatch):
    """The phase can write its transcript itself: a read of all of it at once held all of it in memory."""
    monkeypatch.setattr(h.TranscriptMirror, "CHUNK_BYTES", 64)
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join(b'{"n":%03d}\n' % i for i in range(30)))  # 300 bytes of whole lines
    store = FakeHandover()
    mirror = h.TranscriptMirror(store, "j", "p")
    while mirror.mirror(path, "s-1"):
        pass
    assert all(len(d) <= 64 for _, d in store.chunks) and len(store.chunks) > 1
    assert b"".join(d for _, d in store.chunks) == path.read_bytes()


def test_a_restored_transcript_never_writes_through_a_symlink(tmp_path: Path):
    target = tmp_path / "projects" / "d" / "s.jsonl"
    h.restore_transcript(b"x\n", target)
    assert target.read_bytes() == b"x\n" and oct(target.stat().st_mode & 0o777) == "0o600"
    elsewhere = tmp_path / "elsewhere"
    target.unlink()
    target.symlink_to(elsewhere)
    with pytest.raises(OSError):
        h.restore_transcript(b"y\n", target)
    assert not elsewhere.exists()


class RecordingHandover(FakeHandover):
    def __init__(self):
        super().__init__()
        self.saves: list[dict] = []

    def save(self, job_id, phase_id, **values):
        self.saves.append(values)


def in_place_durability(tmp_path: Path, transcript_bytes: bytes):
    """(a recording store, the transcript file, the PhaseDurability) of phase p of job j in place."""
    spec = PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="x", working_dir=str(tmp_path))
    store = RecordingHandover()
    transcript = tmp_path / "s-1.jsonl"
    transcript.write_bytes(transcript_bytes)
    durability = h.PhaseDurability(store, "j", "p", h.SavedRequest(spec, RetryPolicy(), 1),
                                   h.movability("IN_PLACE", tmp_path, None, "", (tmp_path,)), "r-a",
                                   lambda session: transcript, CODEC)
    return store, transcript, durability


async def test_boundaries_faster_than_the_store_are_saved_together_with_the_latest_state(tmp_path: Path):
    """Every tool call's end asks for a save (a crash resumes after the last finished call): those
    asked for while one waits are one save of the latest transcript and attempts, not a queue."""
    store, transcript, durability = in_place_durability(tmp_path, b"")
    await durability.start(h.SavedControl())
    for n in range(1, 51):
        with open(transcript, "ab") as f:
            f.write(b'{"tool":%d}\n' % n)
        durability.progress("s-1", (Attempt(number=n, status=PhaseStatus.FAILED, replica_id="r-a"),))
    await durability.settle()
    assert len(store.saves) == 2  # the start, then one save for the fifty boundaries
    assert CODEC.decode_request(store.saves[-1]["request"]).attempts[0].number == 50
    assert b"".join(d for _, d in store.chunks) == transcript.read_bytes()


async def test_a_turn_boundary_mirrors_the_transcript_and_saves_the_attempts_in_order(tmp_path: Path):
    store, transcript, durability = in_place_durability(tmp_path, b'{"turn":1}\n')
    await durability.start(h.SavedControl())
    durability.progress("s-1", ())
    await durability.settle()
    with open(transcript, "ab") as f:
        f.write(b'{"turn":2}\n')
    attempt = Attempt(number=1, status=PhaseStatus.FAILED, replica_id="r-a")
    durability.progress("s-1", (attempt,))
    await durability.settle()
    assert b"".join(d for _, d in store.chunks) == transcript.read_bytes()
    assert [s.get("session_id") for s in store.saves] == [None, "s-1", "s-1"]
    assert CODEC.decode_request(store.saves[-1]["request"]).attempts == (attempt,)
    assert store.saves[0]["movable"] is False and "marked shared" in store.saves[0]["not_movable_reason"]


async def test_after_close_no_save_writes_the_state_back(tmp_path: Path):
    """An ended phase's state is forgotten after ``close``: a save still scheduled then is made before
    it, and none after (one made after the forget inserted the state again, as a movable phase's:
    seen in CI as test_a_phase_keeps_its_state..._but_its_transcript)."""
    store, transcript, durability = in_place_durability(tmp_path, b'{"turn":1}\n')
    await durability.start(h.SavedControl())
    durability.progress("s-1", ())  # scheduled before the end: made
    await durability.close()
    made = len(store.saves)
    assert made == 2
    durability.progress("s-1", ())
    durability.control_changed(h.SavedControl())
    await durability.settle()
    assert len(store.saves) == made

"""Response framing from stored event bytes: what a client decodes is the events, in order, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.properties import examples

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.wire import MAX_RESPONSE_BYTES, event_responses, frame_events, result_response
from helix_runner.phases.event_log import BATCH_BYTES


def event(sequence: int, text: str = "") -> bytes:
    """A stored event body, as the record encoder writes it."""
    message = ev.StreamEvent(sequence=sequence, job_id="job", phase_id="p1")
    message.assistant_text.text = text
    return message.SerializeToString()


def decoded(responses, message_type=pb.RunPhaseResponse) -> list[list[int]]:
    """The sequences of the events each response carries, decoded with the generated code."""
    return [[e.sequence for e in message_type.FromString(r).events] for r in responses]


@pytest.mark.parametrize("message_type", [pb.RunPhaseResponse, pb.WatchPhaseResponse])
def test_events_decode_as_both_response_types_in_order(message_type):
    bodies = [event(i, "x" * i) for i in range(1, 6)]
    (response,) = event_responses(bodies)
    assert decoded([response], message_type) == [[1, 2, 3, 4, 5]]
    assert [e.assistant_text.text for e in message_type.FromString(response).events] == [
        "x" * i for i in range(1, 6)
    ]
    assert not message_type.FromString(response).HasField("result")


def test_no_events_no_response():
    assert list(event_responses([])) == []


def test_a_large_batch_is_split_below_the_limit_without_losing_or_reordering():
    bodies = [event(i, "y" * 100_000) for i in range(1, 31)]  # ~3 MB
    responses = list(event_responses(bodies))
    assert len(responses) > 1
    assert all(len(r) <= MAX_RESPONSE_BYTES for r in responses)
    assert [s for group in decoded(responses) for s in group] == list(range(1, 31))


def test_an_event_larger_than_the_limit_travels_alone():
    big = event(2, "z" * (MAX_RESPONSE_BYTES + 10))
    responses = list(event_responses([event(1), big, event(3)]))
    assert decoded(responses) == [[1], [2], [3]]


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=40))
def test_any_sizes_round_trip(sizes):
    # Text lengths around the varint boundaries (127/128, 16383/16384 bytes) included by the range.
    bodies = [event(i + 1, "a" * n) for i, n in enumerate(sizes)]
    responses = list(event_responses(bodies))
    assert [s for group in decoded(responses) for s in group] == list(range(1, len(sizes) + 1))
    assert b"".join(responses) == b"".join(
        pb.RunPhaseResponse(events=[ev.StreamEvent.FromString(b)]).SerializeToString() for b in bodies
    )


@pytest.mark.parametrize("message_type", [pb.RunPhaseResponse, pb.WatchPhaseResponse])
def test_the_result_response_carries_only_the_result(message_type):
    result = res.PhaseResult(
        job_id="job",
        phase_id="p1",
        status=res.PHASE_STATUS_SUCCEEDED,
        last_sequence=7,
        reason="completed " + "r" * 300,
    )
    message = message_type.FromString(result_response(result.SerializeToString()))
    assert message.result == result and list(message.events) == []


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=20_000), min_size=0, max_size=30), st.integers(min_value=0))
def test_framing_concatenates_so_batches_join_into_one_message(sizes, cut):
    # The event log frames each batch once and joins a watcher's queued batches: that is only the
    # same message if framing a + b equals framing a, then framing b.
    bodies = [event(i + 1, "a" * n) for i, n in enumerate(sizes)]
    cut = cut % (len(bodies) + 1)
    joined = frame_events(bodies[:cut]) + frame_events(bodies[cut:])
    assert joined == frame_events(bodies) == b"".join(event_responses(bodies)) if bodies else joined == b""
    for message_type in (pb.RunPhaseResponse, pb.WatchPhaseResponse):
        assert list(message_type.FromString(joined).events) == [ev.StreamEvent.FromString(b) for b in bodies]


def test_a_joined_batch_fits_a_response():
    assert BATCH_BYTES <= MAX_RESPONSE_BYTES

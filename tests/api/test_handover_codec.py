"""The hand-over's stored request (api/handover_codec.py): a declared form that the next release reads.

The fixtures in tests/fixtures/handover/ were written by a release and are never rewritten by a test:
request-msgspec-json.json by main 4f034a8 (the undeclared msgspec JSON, before the declared form),
request-v1.binpb and fields-v1.json by the first release with the declared form
(``support.handover_sample.write_fixtures``). A later release must read them as they are.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.handover_sample import (
    ADDED_AFTER_V1,
    FIXTURES,
    field_table,
    full_request,
    sample_request,
    v1_request,
)

from helix.runner.internal.v1 import handover_pb2
from helix_runner.api.handover_codec import FORMAT, ProtoHandoverCodec, request_to_proto
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.errors import RunnerError
from helix_runner.phases.handover import encode_legacy_request

CODEC = ProtoHandoverCodec()


def _default(field: dataclasses.Field) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return ""  # a required field: set when not empty


def test_every_field_of_the_spec_and_the_policy_round_trips():
    """The sample sets every field away from its default, so a field added to PhaseSpec or RetryPolicy
    without a place in the stored form fails here (it would come back as its default)."""
    saved = full_request()
    for cls, value in ((PhaseSpec, saved.spec), (RetryPolicy, saved.retry)):
        unset = [f.name for f in dataclasses.fields(cls) if getattr(value, f.name) == _default(f)]
        assert unset == [], f"the sample leaves {cls.__name__} fields at their default: {unset}"
    assert CODEC.decode_request(CODEC.encode_request(saved)) == saved


def test_this_release_reads_the_declared_form_of_the_first_release():
    assert CODEC.decode_request((FIXTURES / "request-v1.binpb").read_bytes()) == v1_request()


def test_rows_written_before_the_declared_form_are_still_read():
    """An old replica's row (msgspec JSON of the dataclasses, main 4f034a8) is read as it was meant."""
    data = (FIXTURES / "request-msgspec-json.json").read_bytes()
    assert data[:1] == b"{"
    assert CODEC.decode_request(data) == sample_request()
    # The fixture is what that code wrote (the spec has gained fields since, which it did not write).
    written = json.loads(encode_legacy_request(sample_request()))
    for name in ADDED_AFTER_V1:
        del written["spec"][name]
    assert written == json.loads(data)


def test_no_field_of_the_first_declared_form_changed_incompatibly():
    """Each field the first release declared keeps its number, type, repetition, presence and message
    or enum type (a rename is harmless on the wire); fields may only be added."""
    declared = json.loads((FIXTURES / "fields-v1.json").read_text())
    now = field_table()
    changed = [f"{message}.{number} {was} -> {now.get(message, {}).get(number)}"
               for message, fields in declared.items() for number, was in fields.items()
               if (now.get(message, {}).get(number) or [None])[1:] != was[1:]]
    assert changed == []


def test_the_field_check_sees_a_retyped_field():
    """The check above compares what matters: a field turned from int64 into a string is caught."""
    declared = json.loads((FIXTURES / "fields-v1.json").read_text())
    attempt = declared["helix.runner.v1.Attempt"]
    assert attempt["15"][:2] == ["last_sequence", 3]  # TYPE_INT64
    now = field_table()
    now["helix.runner.v1.Attempt"]["15"] = ["last_sequence", 9, False, False, ""]  # TYPE_STRING
    assert now["helix.runner.v1.Attempt"]["15"][1:] != attempt["15"][1:]


def test_a_newer_release_s_added_fields_and_enum_values_are_read_past():
    """What a later release adds (a field, an attempt end kind) does not stop this one reading the rest."""
    msg = request_to_proto(full_request())
    msg.attempts[0].end_kind = 999  # an end kind this release does not know
    data = msg.SerializeToString() + b"\xf8\x06\x01"  # field 111 (varint 1): unknown here
    back = CODEC.decode_request(data)
    assert back.attempts[0].end_kind is AttemptEndKind.UNSPECIFIED
    assert back.spec == full_request().spec and back.attempts[1:] == full_request().attempts[1:]


@pytest.mark.parametrize("data", [
    handover_pb2.SavedPhaseRequest(format=FORMAT + 1).SerializeToString(),
    handover_pb2.SavedPhaseRequest(format=0).SerializeToString(),
    b"\xff\xff\xff",
])
def test_a_format_it_does_not_know_is_refused_with_a_reason(data: bytes):
    """A format from a later release that changed a meaning, or bytes no form reads: the adopter gives
    the phase up with "its saved state cannot be read" (phases/adoption.py) instead of guessing."""
    with pytest.raises(RunnerError) as caught:
        CODEC.decode_request(data)
    assert caught.value.reason == "HANDOVER_STATE_UNREADABLE"

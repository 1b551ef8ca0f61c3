"""Page tokens: opaque, bound to their query, and every bad token is one clear INVALID_ARGUMENT."""

from __future__ import annotations

import base64

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helix_runner.api.pagination import make_token, page_size, read_token
from helix_runner.errors import ErrorKind, RunnerError

QUERY = {"project_id": "alpha", "status": "RUNNING"}


def test_a_token_resumes_where_its_page_ended():
    token = make_token(QUERY, [1_700_000_000_000, "job-7"])
    assert read_token(token, QUERY) == [1_700_000_000_000, "job-7"]
    assert "=" not in token and base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))  # URL-safe


def test_no_token_is_the_first_page():
    assert read_token("", QUERY) is None


def test_the_query_binding_ignores_key_order():
    token = make_token({"b": 2, "a": 1}, [3])
    assert read_token(token, {"a": 1, "b": 2}) == [3]


def test_a_token_from_another_query_is_refused():
    token = make_token(QUERY, ["x"])
    with pytest.raises(RunnerError) as caught:
        read_token(token, {**QUERY, "project_id": "beta"})
    assert (caught.value.kind, caught.value.reason) == (ErrorKind.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN")
    assert "different parameters" in caught.value.message and caught.value.metadata == {"field": "page_token"}


def _encoded(value) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        "not base64 at all!",
        "é",  # not ASCII
        _encoded([1, 2]),  # JSON, but not an object
        _encoded({"p": [1]}),  # no query fingerprint
        _encoded({"q": "0" * 16}),  # no position
        base64.urlsafe_b64encode(b"\xff\xfe{").decode(),  # not JSON
    ],
)
def test_malformed_tokens_are_invalid_argument(token):
    with pytest.raises(RunnerError) as caught:
        read_token(token, QUERY)
    assert (caught.value.kind, caught.value.reason) == (ErrorKind.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN")


def test_a_position_that_is_not_a_list_is_refused():
    token = make_token(QUERY, [1])
    forged = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    forged["p"] = {"sequence": 1}
    with pytest.raises(RunnerError, match="page_token"):
        read_token(_encoded(forged), QUERY)


@given(st.text(max_size=200))
def test_any_text_is_a_position_or_a_clear_error(token):
    try:
        position = read_token(token, QUERY)
    except RunnerError as exc:
        assert exc.reason == "INVALID_PAGE_TOKEN"
    else:
        assert position is None or isinstance(position, list)


@pytest.mark.parametrize(
    ("requested", "expected"), [(0, 50), (1, 1), (50, 50), (499, 499), (500, 500), (10**6, 500)]
)
def test_page_size_defaults_and_caps(requested, expected):
    assert page_size(requested, default=50, maximum=500) == expected


def test_a_negative_page_size_is_invalid():
    with pytest.raises(RunnerError) as caught:
        page_size(-1, default=50, maximum=500)
    assert (caught.value.reason, caught.value.metadata) == ("INVALID_FIELD", {"field": "page_size"})


@pytest.mark.parametrize(
    "position", [[1], [1, "a", 2], ["1", "a"], [1, 2], [1.5, "a"], [True, "a"], [None, "a"]]
)
def test_a_position_of_the_wrong_shape_is_a_malformed_token(position):
    # Positions go into SQL: a crafted token must be INVALID_ARGUMENT, never a server error.
    token = make_token(QUERY, position)
    with pytest.raises(RunnerError) as caught:
        read_token(token, QUERY, (int, str))
    assert (caught.value.reason, caught.value.message) == ("INVALID_PAGE_TOKEN", "page_token is malformed")
    assert read_token(make_token(QUERY, [1, "a"]), QUERY, (int, str)) == [1, "a"]

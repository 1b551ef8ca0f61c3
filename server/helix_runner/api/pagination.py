"""Opaque page tokens that are bound to the query they came from (AIP-158)."""

from __future__ import annotations

import base64
import hashlib

import orjson

from helix_runner.errors import ErrorKind, RunnerError


def _fingerprint(query: object) -> str:
    return hashlib.sha256(orjson.dumps(query, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def make_token(query: object, position: list) -> str:
    """A token for the page after ``position`` of ``query``."""
    raw = orjson.dumps({"q": _fingerprint(query), "p": position})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_token(token: str, query: object, shape: tuple[type, ...] | None = None) -> list | None:
    """The position a token resumes from; INVALID_ARGUMENT if it is malformed or from another query.

    ``shape`` is the type of each element of the position the query's tokens carry.
    """
    if not token:
        return None
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        position = data["p"]
        fingerprint = data["q"]
    except (ValueError, KeyError, TypeError):
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN", "page_token is malformed",
                          {"field": "page_token"}) from None
    if fingerprint != _fingerprint(query) or not isinstance(position, list):
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN",
                          "page_token belongs to a query with different parameters", {"field": "page_token"})
    if shape is not None and (len(position) != len(shape) or not all(
            type(value) is kind for value, kind in zip(position, shape, strict=True))):
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN", "page_token is malformed",
                          {"field": "page_token"})
    return position


def page_size(requested: int, default: int, maximum: int) -> int:
    if requested < 0:
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", "page_size must not be negative",
                          {"field": "page_size"})
    return min(requested or default, maximum)

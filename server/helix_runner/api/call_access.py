"""A call's principal, from its credentials as either transport presents them (docs/tenancy.md).

gRPC gives the ``authorization`` header and, with mutual TLS, the verified client certificate
(``context.auth_context()``); the Connect path gives the header only. A call another replica
forwarded carries the caller it acts for (``x-helix-principal``); that is believed only from a
caller that is admin everywhere (the replicas' shared token), and the call is then checked as
that caller, so a replica's own credentials never widen what the caller may do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helix_runner.api.auth import unauthenticated
from helix_runner.api.authorization import Authorization
from helix_runner.api.forwarding import FORWARDED_HEADER, PRINCIPAL_HEADER
from helix_runner.api.principals import Authenticator, may_carry, principal_from_header
from helix_runner.domain.access import Principal


class CallAccess:
    """Resolves each call's principal; holds the permission check and the audit trail."""

    def __init__(self, authenticator: Authenticator, authorization: Authorization,
                 annotate: Callable[[str, str], None] | None = None):
        self.authenticator = authenticator
        self.authorization = authorization
        # Names the caller on the call's trace span (telemetry/grpc_interceptor.py annotate_principal).
        self.annotate = annotate

    def principal(self, context: Any) -> Principal:
        metadata = context.invocation_metadata() or ()
        principal = self.authenticator.from_metadata(metadata, certificate_subject(context))
        if principal is None:
            raise unauthenticated()
        forwarded = carried = None
        for key, value in metadata:
            if key == FORWARDED_HEADER:
                forwarded = value
            elif key == PRINCIPAL_HEADER:
                carried = value
        if forwarded is not None and carried is not None and may_carry(principal):
            caller = principal_from_header(carried)
            if caller is None:
                raise unauthenticated()
            principal = caller
        if self.annotate is not None:
            self.annotate(principal.name, principal.source)
        return principal

    @staticmethod
    def peer(context: Any) -> str:
        peer = getattr(context, "peer", None)
        try:
            return peer() if callable(peer) else ""
        except Exception:  # noqa: BLE001 - a context without a peer (tests' fakes)
            return ""


def certificate_subject(context: Any) -> str:
    """The verified client certificate's subject ("" without one)."""
    auth_context = getattr(context, "auth_context", None)
    if not callable(auth_context):
        return ""
    try:
        properties = auth_context() or {}
    except Exception:  # noqa: BLE001 - no transport security
        return ""
    for key in ("x509_subject", "x509_common_name"):
        values = properties.get(key)
        if values:
            value = values[0].decode("utf-8", "replace") if isinstance(values[0], bytes) else str(values[0])
            return value if key == "x509_subject" else f"CN={value}"
    return ""

"""Standard Webhooks signatures: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature`` (HMAC-SHA256).

Signed with the ``standardwebhooks`` package, the same code receivers verify with (its
``Webhook.sign``), so what is sent is what their library expects, byte for byte: ``v1,<base64 of
HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>``. A secret is ``whsec_`` and the base64 of its
bytes; the server makes 32 random bytes when a subscription comes without one.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from datetime import UTC, datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64


def new_secret() -> str:
    """A fresh secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def check_secret(secret: str) -> str | None:
    """What is wrong with a caller's secret, or None (``whsec_`` + base64 of 24 to 64 bytes)."""
    if not secret.startswith(SECRET_PREFIX):
        return f"must start with {SECRET_PREFIX} (Standard Webhooks' form: {SECRET_PREFIX}<base64>)"
    try:
        raw = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        return f"must be {SECRET_PREFIX} followed by base64"
    if not MIN_SECRET_BYTES <= len(raw) <= MAX_SECRET_BYTES:
        return f"must hold {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes"
    return None


def signed_headers(secret: str, delivery_id: str, body: bytes, now_s: float) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt (the timestamp is the attempt's, so a retry
    still passes the receiver's five-minute tolerance)."""
    when = datetime.fromtimestamp(int(now_s), UTC)
    signature = Webhook(secret).sign(delivery_id, when, body.decode("utf-8"))
    return {"webhook-id": delivery_id, "webhook-timestamp": str(int(now_s)), "webhook-signature": signature}

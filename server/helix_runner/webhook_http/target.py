"""What a webhook URL may be (checked when a subscription is created, again before each delivery).

``http`` or ``https``, a host, an optional port, a path; no user info (credentials in a URL end up in
logs) and no fragment. An IP literal is checked against the address rules at once
(``domain/addresses.py``); a name is checked after it is resolved, at each delivery
(``webhook_http/sender.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from helix_runner.domain.addresses import OperatorExceptions, normalize_host, parse_ip, refusal
from helix_runner.domain.webhooks import MAX_URL_LENGTH


@dataclass(frozen=True)
class WebhookUrl:
    """A parsed webhook URL; ``host`` as compared (lower case, an IP literal canonical)."""

    url: str
    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> WebhookUrl:
        """ValueError saying what is wrong."""
        if not url or len(url) > MAX_URL_LENGTH:
            raise ValueError(f"must be 1 to {MAX_URL_LENGTH} characters")
        if any(c.isspace() or ord(c) < 0x20 for c in url):
            raise ValueError("must not contain spaces or control characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"is not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https"):
            raise ValueError("must start with https:// or http://")
        if not parts.hostname:
            raise ValueError("names no host")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry a user or password (put credentials in the secret, not the URL)")
        if parts.fragment:
            raise ValueError("must not have a fragment (#...)")
        host = normalize_host(parts.hostname)
        if parse_ip(host) is None:
            try:
                host.encode("idna")
            except UnicodeError:
                raise ValueError("names a host that is not a valid domain name") from None
        return cls(url, parts.scheme, host, port or (443 if parts.scheme == "https" else 80))

    def literal_refusal(self, exceptions: OperatorExceptions) -> str | None:
        """Why this URL is refused already (its host is an IP literal that is not public), or None."""
        ip = parse_ip(self.host)
        if ip is None:
            return None
        why = refusal(ip)
        if why is None or exceptions.allows(self.host, self.port, ip):
            return None
        return f"{ip} is a {why} address (webhook_private_allow may allow {self.host}:{self.port})"

"""``--database-url``: which store to open. ``sqlite:///absolute/path`` or ``postgresql://…``.

The default is the embedded SQLite file in the data directory. PostgreSQL URLs are libpq
connection URIs (``postgresql://user@host:port/db?sslmode=verify-full``); a password is better
kept out of the URL (``PGPASSWORD``, ``~/.pgpass`` or a service file, which libpq reads), and it
is never shown: ``redacted()`` is what logs and errors print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

SQLITE_FILE_NAME = "helix-runner.sqlite3"
_SCHEMES = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql"}


@dataclass(frozen=True)
class DatabaseUrl:
    """A parsed, validated database URL."""

    kind: str  # "sqlite" or "postgresql"
    url: str
    sqlite_path: Path | None = None

    def redacted(self) -> str:
        """The URL without its password, for logs and error messages."""
        return _redact(self.url)


def default_database_url(data_dir: Path) -> str:
    return f"sqlite://{(data_dir / SQLITE_FILE_NAME).expanduser().absolute()}"


def parse_database_url(text: str) -> DatabaseUrl:
    """Validates a database URL; ValueError with a one-line reason (no password in it) if it is bad."""
    text = text.strip()
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", text)
    scheme = _SCHEMES.get(match.group(1).lower()) if match else None
    if scheme is None:
        raise ValueError(f"{_redact(text)!r} is not sqlite:///absolute/path or postgresql://host/database")
    if scheme == "sqlite":
        rest = text[match.end() :]
        if not rest.startswith("///") or "?" in rest or "#" in rest:
            raise ValueError(f"{text!r}: a SQLite URL is sqlite:///absolute/path/to/file.sqlite3")
        path = Path(rest[2:])
        if path == Path("/") or text.endswith("/"):
            raise ValueError(f"{text!r}: a SQLite URL names a file, not a directory")
        return DatabaseUrl("sqlite", f"sqlite://{path}", path)
    if any(ord(c) < 32 for c in text):
        raise ValueError("a PostgreSQL URL must not contain control characters")
    parts = urlsplit(text)
    if not parts.netloc and "host=" not in parts.query:
        raise ValueError(
            f"{_redact(text)!r}: a PostgreSQL URL names a host (postgresql://host/database, or "
            "postgresql:///database?host=/socket/dir)"
        )
    try:
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(text)  # libpq's own parser: unknown parameters and bad syntax fail here
    except Exception as exc:  # noqa: BLE001 - psycopg raises ProgrammingError; the message is libpq's
        raise ValueError(
            f"{_redact(text)!r} is not a valid PostgreSQL URL: "
            f"{_redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}"
        ) from None
    return DatabaseUrl("postgresql", text)


def _redact(text: str) -> str:
    """Replaces a password in a URL's user-info and in a ``password=`` parameter by ``***``."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

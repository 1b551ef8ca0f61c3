"""A throwaway PostgreSQL cluster for a test session: Debian's server binaries, a private socket.

``initdb`` refuses to run as root, so as root the cluster belongs to the ``postgres`` OS user
(Debian's package creates it) and its commands run through ``runuser``. The server listens only
on a Unix socket in the cluster's own temporary directory (no TCP port, nothing to collide with),
with trust authentication and durability turned off: it lives for one test session.
``scripts/install-postgres`` installs the server when it is missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

SERVER_USER = "postgres"
INSTALL_HINT = (
    "scripts/install-postgres installs Debian's postgresql; HELIX_PG_BINDIR points at other binaries"
)


class PostgresUnavailable(Exception):
    """No PostgreSQL server can be started here; the message says why (a test skip reason)."""


def find_bindir() -> Path:
    """The directory with ``initdb`` and ``pg_ctl``: $HELIX_PG_BINDIR, Debian's newest, or $PATH."""
    if os.environ.get("HELIX_PG_BINDIR"):
        return Path(os.environ["HELIX_PG_BINDIR"])
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if debian:
        return Path(debian[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise PostgresUnavailable(f"no PostgreSQL server binaries (initdb) found; {INSTALL_HINT}")


class PostgresCluster:
    """initdb + pg_ctl start in a temporary directory; ``url(db)`` for clients, ``stop()`` removes it all."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self._as_user: list[str] = []
        self._owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self._owner = pwd.getpwnam(SERVER_USER)
            except KeyError:
                raise PostgresUnavailable(
                    f"running as root and there is no {SERVER_USER!r} OS user to run "
                    f"the server as; {INSTALL_HINT}"
                ) from None
            self._as_user = ["runuser", "-u", SERVER_USER, "--"]
        self.root = Path(tempfile.mkdtemp(prefix="helix-pg-"))
        self.datadir = self.root / "data"
        self.socket_dir = self.root
        self.log = self.root / "server.log"
        self._counter = 0

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [*self._as_user, *argv], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise PostgresUnavailable(f"{Path(argv[0]).name} failed: {' | '.join(tail)}")

    def start(self) -> PostgresCluster:
        if self._owner is not None:
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
        try:
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            )
            options = (
                f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=100 -c shared_buffers=32MB"
            )
            self._run(
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            )
        except (PostgresUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            log_tail = self.log.read_text(errors="replace")[-500:] if self.log.exists() else ""
            self.remove()
            raise PostgresUnavailable(
                f"cannot start a PostgreSQL cluster: {exc} {log_tail}".strip()
            ) from None
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop")
        except (PostgresUnavailable, subprocess.TimeoutExpired):
            pass
        self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        self._counter += 1
        name = f"{prefix}_{os.getpid()}_{self._counter}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def execute(self, url: str, sql: str, params: tuple = ()) -> list[tuple]:
        """Runs one statement as the superuser (tests use it to play a paused replica or a clock)."""
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def set_lease(self, url: str, replica_id: str, seconds_from_now: float) -> None:
        """Moves a replica's lease to expire ``seconds_from_now`` (negative: it ran out, as when its
        process stopped renewing it)."""
        self.execute(url, "UPDATE replicas SET lease_expires_at = now() + make_interval(secs => %s) "
                          "WHERE replica_id = %s", (seconds_from_now, replica_id))

"""Fixtures shared by all tests; the code behind them lives in tests/support/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from support.properties import DEV_EXAMPLES, PROFILE
from support.sandbox import ClaudeSandbox
from support.scripted_servers import ScriptedApiFactory
from support.test_claude import test_claude

from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.process.claude_locator import ClaudeBinary, ClaudeNotFoundError, locate_claude
from helix_runner.process.host_git import HOST_GIT
from helix_runner.store.protocol import PhaseRow
from helix_runner.store.sqlite_store import SqliteStore

# Property tests: every example in the full suite, a sample in the fast tier (support/properties.py).
settings.register_profile("ci", settings())
settings.register_profile("dev", max_examples=DEV_EXAMPLES)
settings.load_profile(PROFILE)


def pytest_report_header() -> str:
    return f"hypothesis profile: {PROFILE} (tests/support/properties.py)"


@pytest.fixture(autouse=True)
def _host_git_as_it_was() -> Iterator[None]:
    """The process's git runner as before each test: an in-process server configures it for its own
    data dir and workspace roots, which the next test's repositories lie outside of."""
    saved = HOST_GIT.box, HOST_GIT.box_note, HOST_GIT.git_roots
    yield
    if HOST_GIT.box is not saved[0] and hasattr(HOST_GIT.box, "close"):
        HOST_GIT.box.close()  # a Landlock box's spawner process
    HOST_GIT.box, HOST_GIT.box_note, HOST_GIT.git_roots = saved


@pytest.fixture(scope="session")
def claude_binary() -> ClaudeBinary:
    """The real Claude Code CLI (via the runner's locator; ``HELIX_TEST_CLAUDE`` names another one,
    docs/testing.md "Another CLI"); tests needing it skip if there is none."""
    try:
        binary = locate_claude(test_claude() or None)
    except ClaudeNotFoundError as exc:
        pytest.skip(str(exc))
    binary.version()  # fail early, with the reason, if the binary cannot even start
    return binary


@pytest.fixture
def scripted_api() -> Iterator[ScriptedApiFactory]:
    """Factory: ``scripted_api(script)`` starts a scripted Messages API stand-in; all stop at teardown."""
    factory = ScriptedApiFactory()
    yield factory
    factory.stop_all()


@pytest.fixture
def claude_sandbox(claude_binary: ClaudeBinary, tmp_path: Path) -> ClaudeSandbox:
    """The real CLI with a private HOME and an empty working directory under ``tmp_path``."""
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    return ClaudeSandbox(binary=claude_binary.path, home=home, workdir=workdir)


@pytest.fixture
def runner_factory(tmp_path: Path):
    """``async with runner_factory(api, **config) as runner``: the real server in-process (see support)."""
    from contextlib import asynccontextmanager

    from support.runner_server import start_runner

    @asynccontextmanager
    async def factory(api=None, **config):
        async for harness in start_runner(tmp_path, api, **config):
            yield harness

    return factory


@pytest.fixture
def chromium() -> str:
    """Debian's headless Chromium for the browser tests; skips, saying how to install it, without one."""
    from support.browser import chromium_path

    path = chromium_path()
    if path is None:
        pytest.skip("no chromium: scripts/install-browser installs Debian's package (scripts/test runs it)")
    return path


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throwaway PostgreSQL cluster for the session (see support/postgres.py); skips, saying why, if none starts."""
    from support.postgres import PostgresCluster, PostgresUnavailable

    try:
        cluster = PostgresCluster().start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster) -> str:
    """The URL of a new, empty database in the session's cluster."""
    return postgres_cluster.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """A new, empty database of each store: the tests using it run once against each."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'db.sqlite3'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A new SQLite store in the test's directory, closed after it (the contract suite,
    tests/store/test_store_contract.py, has its own: one of each kind)."""
    opened = SqliteStore(tmp_path / "db.sqlite3")
    yield opened
    opened.close()


@pytest.fixture
def running_phase(store: SqliteStore) -> PhaseRow:
    """Phase ``p`` of job ``j`` (project ``proj``), RUNNING, in ``store``."""
    store.get_or_create_job("j", "proj", 1)
    return store.insert_phase(PhaseRow(job_id="j", phase_id="p", ordinal=0, project_id="proj",
                                       status=PhaseStatus.RUNNING, create_time_ns=1))

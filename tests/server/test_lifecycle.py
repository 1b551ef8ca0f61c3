"""The server's parts start in order and stop newest first, also when a later part cannot start (issue 34.4)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from helix_runner.config import load_config
from helix_runner.config_file import SECTIONS
from helix_runner.server import StartupError, start_server
from helix_runner.server.lifecycle import Components


class Part:
    def __init__(self, name: str, log: list[str], *, fail_start: bool = False, fail_stop: bool = False):
        self.name, self.log, self.fail_start, self.fail_stop = name, log, fail_start, fail_stop

    async def start(self) -> None:
        if self.fail_start:
            raise StartupError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        if self.fail_stop:
            raise RuntimeError("boom")


def test_a_part_that_cannot_start_stops_those_before_it_newest_first():
    log: list[str] = []

    async def run() -> None:
        parts = Components()
        await parts.start(Part("a", log))
        await parts.start(Part("b", log))
        with pytest.raises(StartupError, match="c cannot start"):
            await parts.start(Part("c", log, fail_start=True))
        assert parts.names == []

    asyncio.run(run())
    assert log == ["start a", "start b", "stop b", "stop a"]


def test_one_part_failing_to_stop_does_not_keep_the_others_running():
    log: list[str] = []

    async def run() -> None:
        parts = Components()
        for name in ("lock", "store", "ports"):
            await parts.start(Part(name, log, fail_stop=name == "store"))
        await parts.stop()
        await parts.stop()  # a second stop stops nothing twice

    asyncio.run(run())
    assert log == ["start lock", "start store", "start ports", "stop ports", "stop store", "stop lock"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_start_that_fails_late_leaves_the_data_dir_free_for_the_next_server(tmp_path):
    """The metrics port is opened after the data dir is locked, the store opened, the model access
    and the gRPC port bound: its failure must undo all of it, or the next start finds the lock held."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    flags = {"port": 0, "data_dir": str(tmp_path / "data"), "workspace_roots": str(tmp_path), "sandbox": "off",
             "metrics_port": busy.getsockname()[1]}

    async def run() -> None:
        with pytest.raises(StartupError, match="cannot serve metrics"):
            await start_server(load_config(flags=flags, environ={}), server_env={"PATH": "/usr/bin:/bin"})
        running = await start_server(load_config(flags={**flags, "metrics_port": None}, environ={}),
                                     server_env={"PATH": "/usr/bin:/bin"})
        names = running.parts.names
        await running.drain(0.5)
        assert running.parts.names == []
        assert names.index("data dir") == 0 and names.index("storage") < names.index("phases") < names.index(
            "gRPC ports") < names.index("sweeps")

    try:
        asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        busy.close()


def test_every_config_section_names_the_part_that_reads_it():
    """Each section of the config file is what one part owns (config_file.py, server/*.py docstrings)."""
    import helix_runner.server.assembly as assembly
    import helix_runner.server.background as background
    import helix_runner.server.isolation as isolation
    import helix_runner.server.model_access as model_access
    import helix_runner.server.ports as ports
    import helix_runner.server.storage as storage

    owners = {}
    for module in (assembly, background, isolation, model_access, ports, storage):
        for section in SECTIONS:
            texts = [module.__doc__ or ""] + [getattr(obj, "__doc__", "") or "" for obj in vars(module).values()
                                              if isinstance(obj, type) and obj.__module__ == module.__name__]
            if any(f"[{section}]" in text for text in texts):
                owners.setdefault(section, []).append(module.__name__)
    assert set(owners) == set(SECTIONS), set(SECTIONS) - set(owners)

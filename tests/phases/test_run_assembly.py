"""A run is assembled one way (``PhaseService.assemble``), and the adopter sees the service through a
typed port (``adoption.AdoptionHost``), not as the whole service with its private members."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import helix_runner
from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.config import ServerConfig
from helix_runner.phases import adoption
from helix_runner.phases.service import PhaseService

PACKAGE = Path(helix_runner.__file__).parent


def _calls(name: str) -> list[str]:
    """Where the package calls ``name(...)`` (a constructor), as file:function."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                        found.append(f"{path.relative_to(PACKAGE)}:{fn.name}")
    return found


def test_a_run_its_event_log_and_its_durable_state_are_built_in_one_place():
    """Before, ``_record_and_launch`` and ``Adopter.adopt`` each built all three, by hand and apart."""
    for name in ("PhaseRun", "PhaseEventLog", "PhaseDurability"):
        assert _calls(name) == ["phases/service.py:assemble"], name


def _reached(source: str) -> set[str]:
    """The attributes reached on the adopter's service (``self.service.x``, ``svc.x``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            base = node.value
            if (isinstance(base, ast.Name) and base.id == "svc") or (
                    isinstance(base, ast.Attribute) and base.attr == "service"
                    and isinstance(base.value, ast.Name) and base.value.id == "self"):
                names.add(node.attr)
    return names


def _port_members() -> set[str]:
    port = adoption.AdoptionHost
    return set(port.__annotations__) | {n for n, v in vars(port).items() if inspect.isfunction(v)}


def test_the_adopter_reaches_only_what_its_port_declares_and_nothing_private():
    reached = _reached(inspect.getsource(adoption.Adopter))
    assert reached and reached <= _port_members(), reached - _port_members()
    assert not [n for n in reached if n.startswith("_")]
    assert inspect.signature(adoption.Adopter).parameters["service"].annotation in ("AdoptionHost",
                                                                                    adoption.AdoptionHost)


def test_the_phase_service_is_an_adoption_host(store, tmp_path: Path):
    class NoContainment:
        mode = 0
        limits_available = ()

        def close(self) -> None:
            pass

    service = PhaseService(ServerConfig(data_dir=tmp_path / "data"), store, ProtoRecordEncoder(), NoContainment(),
                           server_env={"PATH": "/usr/bin:/bin"})
    missing = [n for n in _port_members() if not hasattr(service, n)]
    assert missing == []
    for name in ("assemble", "off_loop", "launch_adopted", "waiting_for_room_here"):
        port, real = (inspect.signature(getattr(adoption.AdoptionHost, name)),
                      inspect.signature(getattr(PhaseService, name)))
        assert list(port.parameters) == list(real.parameters), name

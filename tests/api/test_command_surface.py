"""Handlers act on a phase only through the command surface (``phases/commands.py``).

Read from the servicer's source: no handler reaches a running phase's run or controller, each
job-control handler (every RPC routed to the phase's owner but InspectPhase, a question) calls
exactly one command and nothing of the phase service, and the others use the phase service only to
start and watch phases. The import contract ``api-through-commands`` (pyproject.toml) keeps the API
from importing ``phases.control`` or ``phases.run`` at all.
"""

from __future__ import annotations

import ast
import inspect

from helix_runner.api import servicer
from helix_runner.api.routing import ROUTES, Route

# What a running phase is made of: a handler that names one of these reaches past the commands.
PHASE_INTERNALS = {"run", "control", "require_live", "model_switched", "request_stop_with_reason", "snapshot"}
# The phase service, to the API: start and watch phases, new ids, the defaults a request falls back on.
SERVICE_FOR_HANDLERS = {"start", "watch", "new_phase_id", "retry_defaults", "server_status", "require_phase",
                        "fork", "fork_source"}  # ForkPhase starts a phase too
JOB_CONTROL = sorted(name for name, route in ROUTES.items() if route is Route.OWNER and name != "InspectPhase")


def _handlers() -> dict[str, ast.AsyncFunctionDef]:
    tree = ast.parse(inspect.getsource(servicer))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunnerServicer"]
    return {n.name: n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name[:1].isupper()}


def _uses_of(node: ast.AST, member: str) -> list[str]:
    """The names used on ``self.<member>`` inside ``node`` (``self.commands.pause`` -> ``pause``)."""
    return [n.attr for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == member
            and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"]


def test_no_handler_reaches_into_a_running_phase():
    reached = {name: sorted({n.attr for n in ast.walk(handler)
                             if isinstance(n, ast.Attribute) and n.attr in PHASE_INTERNALS})
               for name, handler in _handlers().items()}
    assert {name: attrs for name, attrs in reached.items() if attrs} == {}


def test_each_job_control_handler_calls_one_command_and_nothing_else_of_the_phases():
    handlers = _handlers()
    assert len(JOB_CONTROL) == 16 and set(JOB_CONTROL) <= set(handlers)
    calls = {name: (_uses_of(handlers[name], "commands"), _uses_of(handlers[name], "service")) for name in JOB_CONTROL}
    assert {name: used for name, used in calls.items() if len(used[0]) != 1 or used[1]} == {}


def test_other_handlers_use_the_phase_service_only_to_start_and_watch():
    handlers = _handlers()
    beyond = {name: sorted(set(_uses_of(handler, "service")) - SERVICE_FOR_HANDLERS)
              for name, handler in handlers.items() if name not in JOB_CONTROL}
    assert {name: used for name, used in beyond.items() if used} == {}

"""The offline package's public face: ``helix_runner.offline`` re-exports what its modules define."""

from __future__ import annotations

from types import FunctionType

import helix_runner.offline as offline
from helix_runner.offline import env, script, server


def test_every_exported_name_resolves_to_its_defining_module():
    for name in offline.__all__:
        value = getattr(offline, name)
        homes = [m for m in (script, env, server) if getattr(m, name, None) is value]
        assert homes, f"{name} is exported but defined in none of script, env, server"


def test_the_script_model_and_the_environment_are_exported_whole():
    # What a script author or a test needs, without reaching into the modules behind the face: every
    # class and function the modules define, and their constants (bar the model's internal ones).
    public = {
        name
        for module in (script, env)
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (
            (isinstance(value, type | FunctionType) and value.__module__ == module.__name__)
            or (name.isupper() and isinstance(value, str))
        )
    }
    assert public - {"DEFAULT_SIGNATURE"} <= set(offline.__all__), sorted(public - set(offline.__all__))
    assert {"ScriptedApi", "main", "DEFAULT_MODEL", "Turn", "ContentBlock"} <= set(offline.__all__)

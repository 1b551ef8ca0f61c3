"""Nothing outside ``store/`` asks a store what it is: cluster features go through the ``Cluster`` port.

Whether the database is shared is a property of ``storage.cluster`` (store/cluster.py), chosen once by
``store/factory.open_storage``. Code that probes the store instead (``isinstance(store, SqliteStore)``,
``getattr(store, "phase_owner", None)``, ``config.database.kind != "sqlite"``) switches cluster mode
behind the port's back; this scan of the package's syntax trees finds every such probe.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "server" / "helix_runner"
PROBES = {"isinstance", "getattr", "hasattr", "type"}


def probes(package: Path) -> list[str]:
    """``file:line: call`` for each probe of a store, or of the database's kind, outside ``store/``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES:
                if any("store" in ast.unparse(arg).lower() for arg in node.args[:2]):
                    found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
            elif (isinstance(node, ast.Attribute) and node.attr == "kind"
                  and ast.unparse(node.value).endswith("database") and relative.parts[0] != "config.py"):
                found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_code_outside_the_store_probes_a_store():
    assert probes(PACKAGE) == []


def test_the_scan_finds_each_kind_of_probe(tmp_path):
    (tmp_path / "phases").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "phases" / "probe.py").write_text(
        "def f(self, store, config):\n"
        "    isinstance(store, SqliteStore)\n"
        "    getattr(self.store, 'phase_owner', None)\n"
        "    hasattr(self._store, 'admission_ledger')\n"
        "    isinstance(x, PostgresStore)\n"
        "    return config.database.kind != 'sqlite'\n"
        "    isinstance(event, Ended)\n"  # not a store: fine
    )
    (tmp_path / "store" / "factory.py").write_text("isinstance(store, SqliteStore)\n")  # the store's own business
    assert [line.split(": ", 1)[0] for line in probes(tmp_path)] == [
        "phases/probe.py:2", "phases/probe.py:3", "phases/probe.py:4", "phases/probe.py:5", "phases/probe.py:6"]

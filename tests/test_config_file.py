"""A config file in sections (issue 34, item 4): the same settings as the flat keys, which still work and warn."""

from __future__ import annotations

from pathlib import Path

import pytest

from helix_runner.config import KEYS, ConfigError, load_config
from helix_runner.config_file import SECTION_OF, SECTIONS, TOP_LEVEL, flatten, spelling


def test_every_key_is_in_exactly_one_section_under_a_name_unique_there():
    placed = [flat for keys in SECTIONS.values() for flat, _ in keys]
    assert sorted(placed) == sorted(set(placed)), "a key in two sections"
    assert set(placed) | set(TOP_LEVEL) == set(KEYS)
    for section, keys in SECTIONS.items():
        names = [name for _, name in keys]
        assert len(names) == len(set(names)), section


SECTIONED = """
[server]
port = 50999
log_format = "json"

[sandbox]
mode = "off"
read_paths = ["/opt/tools"]

[gateway]
enabled = false
port = 18443

[egress]
enabled = false
allowed_ports = [443]

[web]
port = 50998

[retry]
max_attempts = 5

[cluster]
max_running_phases = 7

[admission]
max_running_phases = 3

[phases]
default_timeout_seconds = 120

[[webhooks]]
id = "ops"
url = "https://hooks.example.com/runner"
events = ["phase.finished"]
secret_file = "SECRET"

[webhook_delivery]
max_attempts = 4
"""

FLAT = """
port = 50999
log_format = "json"
sandbox = "off"
sandbox_read_paths = ["/opt/tools"]
api_gateway = false
api_gateway_port = 18443
egress_proxy = false
egress_allowed_ports = [443]
web_port = 50998
retry_max_attempts = 5
cluster_max_running_phases = 7
max_running_phases = 3
default_phase_timeout_seconds = 120
webhook_max_attempts = 4

[[webhooks]]
id = "ops"
url = "https://hooks.example.com/runner"
events = ["phase.finished"]
secret_file = "SECRET"
"""


def _load(tmp_path: Path, text: str, notices: list[str]):
    secret = tmp_path / "whsec"
    secret.write_text("whsec_" + "A" * 43 + "=\n")
    path = tmp_path / "config.toml"
    path.write_text(text.replace("SECRET", str(secret)))
    return load_config(environ={}, config_file=path, notices=notices)


def test_a_sectioned_file_and_an_old_flat_one_give_the_same_settings_and_only_the_flat_one_warns(tmp_path):
    new_notices: list[str] = []
    old_notices: list[str] = []
    new = _load(tmp_path, SECTIONED, new_notices)
    old = _load(tmp_path, FLAT, old_notices)
    assert new == old
    assert (new.port, new.sandbox, new.api_gateway_port, new.web_port) == (50999, "off", 18443, 50998)
    assert (new.cluster_max_running_phases, new.max_running_phases, new.retry_max_attempts) == (7, 3, 5)
    assert new.webhook_max_attempts == 4 and len(new.webhooks) == 1
    assert new_notices == []
    assert len(old_notices) == 14
    assert any("sandbox_read_paths is deprecated: write it as [sandbox] read_paths" in n for n in old_notices)
    assert any("api_gateway is deprecated: write it as [gateway] enabled" in n for n in old_notices)
    assert not any("webhooks " in n for n in old_notices), "[[webhooks]] stays at the top"


def test_a_key_given_flat_and_in_its_section_is_refused_naming_both(tmp_path):
    with pytest.raises(ConfigError, match=r"api_gateway_port is given twice: as \[gateway\] port"):
        _load(tmp_path, 'api_gateway_port = 1\n[gateway]\nport = 2\n', [])


def test_an_unknown_key_in_a_section_is_refused_naming_the_section(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'mod' in section \[sandbox\]"):
        _load(tmp_path, '[sandbox]\nmod = "off"\n', [])
    with pytest.raises(ConfigError, match=r"unknown key 'nope'"):
        _load(tmp_path, "nope = 1\n", [])


def test_the_environment_keeps_its_flat_names_and_wins_over_a_section(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[sandbox]\nmode = "required"\n[web]\nhost = "127.0.0.1"\n')
    config = load_config(environ={"HELIX_RUNNER_SANDBOX": "off"}, config_file=path)
    assert config.sandbox == "off"


def test_spelling_names_section_and_key():
    assert spelling("egress_private_allow") == "[egress] private_allow"
    assert spelling("host") == "[server] host"
    assert set(SECTION_OF) == {flat for keys in SECTIONS.values() for flat, _ in keys}


def test_flatten_leaves_webhook_subscriptions_at_the_top():
    values, notices = flatten({"webhooks": [{"id": "a"}], "webhook_delivery": {"ca_file": "/x"}})
    assert values == {"webhooks": [{"id": "a"}], "webhook_ca_file": "/x"} and notices == []


def test_docs_configuration_lists_each_section_with_its_keys():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    for section, keys in SECTIONS.items():
        (row,) = [line for line in doc.splitlines() if line.startswith(f"| `[{section}]` |")]
        for flat, name in keys:
            assert f"`{name}`" in row and (name == flat or f"`{flat}`" in row), (section, flat)


def test_serve_logs_each_flat_key_with_its_new_spelling(tmp_path):
    """The notice reaches the operator: `serve` logs it once logging is set up (here the start then
    fails on a data dir that cannot exist, so no server is left running)."""
    import subprocess
    import sys

    path = tmp_path / "old.toml"
    path.write_text('data_dir = "/dev/null/data"\nlog_format = "text"\nport = 0\n')
    helix = Path(sys.executable).parent / "helix-runner"
    result = subprocess.run([str(helix), "serve", "--config", str(path)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, check=False)
    assert result.returncode == 1, result.stderr
    assert "the flat key data_dir is deprecated: write it as [storage] data_dir" in result.stderr
    assert "the flat key port is deprecated: write it as [server] port" in result.stderr

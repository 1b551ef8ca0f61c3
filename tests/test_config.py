"""Configuration precedence and validation (flags > env > file > defaults)."""

from __future__ import annotations

import pytest

from helix_runner.config import ConfigError, load_config


def test_precedence_flags_over_env_over_file(tmp_path):
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text('port = 1111\nlog_level = "debug"\nmax_concurrent_phases = 3\n')
    env = {"HELIX_RUNNER_PORT": "2222", "HELIX_RUNNER_LOG_LEVEL": "warning"}
    cfg = load_config(flags={"port": 3333, "workspace_roots": [str(tmp_path)]}, environ=env, config_file=cfg_file)
    assert cfg.port == 3333
    assert cfg.log_level == "warning"
    assert cfg.max_concurrent_phases == 3


def test_config_file_from_environment(tmp_path):
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text(f'workspace_roots = ["{tmp_path}"]\nport = 4444\n')
    cfg = load_config(environ={"HELIX_RUNNER_CONFIG": str(cfg_file)})
    assert cfg.port == 4444
    assert cfg.workspace_roots == (tmp_path.resolve(),)


def test_workspace_roots_are_resolved(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    cfg = load_config(environ={"HELIX_RUNNER_WORKSPACE_ROOTS": str(tmp_path / "link")})
    assert cfg.workspace_roots == (real.resolve(),)


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"port": 70000}, {}, "out of range"),
        ({}, {"HELIX_RUNNER_PORT": "eighty"}, "HELIX_RUNNER_PORT"),
        ({"host": "0.0.0.0"}, {}, "without --auth-token-file"),
        ({"log_level": "loud"}, {}, "log level"),
        ({"workspace_roots": ["/does/not/exist"]}, {}, "not a directory"),
        ({}, {"HELIX_RUNNER_ALLOW_BYPASS_PERMISSIONS": "maybe"}, "not a boolean"),
        ({"containment": "docker"}, {}, "containment 'docker' is not one of auto, cgroup"),
        ({"cgroup_parent": "../escape"}, {}, "without '..'"),
        ({"cgroup_parent": "a b"}, {}, "cgroup_parent"),
        ({}, {"HELIX_RUNNER_DEFAULT_MEMORY_LIMIT_BYTES": "lots"}, "not a size"),
        ({"default_memory_limit_bytes": 1024}, {}, "at least 33554432"),
        ({"default_cpu_limit_millicores": 5}, {}, "10 to 1000000"),
    ],
)
def test_bad_values_raise_one_line_errors(tmp_path, flags, env, message):
    with pytest.raises(ConfigError) as caught:
        load_config(flags={"workspace_roots": [str(tmp_path)], **flags}, environ=env)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_unknown_key_in_file_is_rejected(tmp_path):
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'prot'"):
        load_config(config_file=cfg_file, environ={})


def test_non_loopback_with_token_is_allowed(tmp_path):
    token = tmp_path / "t"
    token.write_text("x" * 32)
    cfg = load_config(flags={"host": "0.0.0.0", "auth_token_file": str(token), "workspace_roots": [str(tmp_path)]},
                      environ={})
    assert not cfg.is_loopback
    assert cfg.read_auth_token() == "x" * 32


def test_price_overrides_from_file_and_env(tmp_path):
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text('[price_overrides."my-model"]\ninput_per_mtok = 2\noutput_per_mtok = 8\n')
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)]}, environ={}, config_file=cfg_file)
    assert cfg.price_overrides["my-model"].output_per_mtok == 8.0
    env = {"HELIX_RUNNER_PRICE_OVERRIDES": '{"other": {"input_per_mtok": 1, "output_per_mtok": 2}}'}
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)]}, environ=env)
    assert set(cfg.price_overrides) == {"other"}
    for bad in ('{"m": {"input_per_mtok": 1}}', '{"m": {"input_per_mtok": -1, "output_per_mtok": 1}}', "[1]"):
        with pytest.raises(ConfigError, match="price_overrides"):
            load_config(flags={"workspace_roots": [str(tmp_path)]}, environ={"HELIX_RUNNER_PRICE_OVERRIDES": bad})


def test_containment_settings_and_limits(tmp_path):
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)], "containment": "SUBREAPER"},
                      environ={"HELIX_RUNNER_CGROUP_PARENT": "/helix/phases",
                               "HELIX_RUNNER_DEFAULT_MEMORY_LIMIT_BYTES": "2GiB",
                               "HELIX_RUNNER_DEFAULT_CPU_LIMIT_MILLICORES": "1500"})
    assert (cfg.containment, cfg.cgroup_parent) == ("subreaper", "/helix/phases")
    assert (cfg.default_memory_limit_bytes, cfg.default_cpu_limit_millicores) == (2 << 30, 1500)
    defaults = load_config(flags={"workspace_roots": [str(tmp_path)]}, environ={})
    assert (defaults.containment, defaults.cgroup_parent, defaults.default_memory_limit_bytes) == (
        "auto", "helix-runner", 0)


def test_database_url_defaults_to_sqlite_in_the_data_dir_and_accepts_postgresql(tmp_path):
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)], "data_dir": str(tmp_path / "d")}, environ={})
    assert cfg.database.kind == "sqlite" and cfg.database.sqlite_path == tmp_path / "d" / "helix-runner.sqlite3"
    env = {"HELIX_RUNNER_DATABASE_URL": "postgresql://runner:s3cret@db.internal:5432/helix?sslmode=verify-full",
           "HELIX_RUNNER_REPLICA_ID": "helix-0", "HELIX_RUNNER_ADVERTISE_ADDRESS": "helix-0.helix:50051"}
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)]}, environ=env)
    assert cfg.database.kind == "postgresql" and cfg.replica_id == "helix-0"
    assert cfg.advertise_address == "helix-0.helix:50051"
    assert cfg.database.redacted() == "postgresql://runner:***@db.internal:5432/helix?sslmode=verify-full"
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)], "database_url": f"sqlite://{tmp_path}/x.db"},
                      environ={})
    assert cfg.database.sqlite_path == tmp_path / "x.db"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"database_url": "mysql://h/db"}, "is not sqlite:///absolute/path or postgresql://"),
        ({"database_url": "sqlite://relative.db"}, "sqlite:///absolute/path"),
        ({"database_url": "sqlite:///"}, "names a file"),
        ({"database_url": "postgresql://u:hunter2@h/db?nonsense=1"}, "not a valid PostgreSQL URL"),
        ({"database_url": "postgresql:///db"}, "names a host"),
        ({"replica_id": "no spaces please"}, "replica_id"),
        ({"advertise_address": "runner-0.runner"}, "advertise_address must be host:port"),
        ({"advertise_address": "http://runner-0:50051"}, "advertise_address must be host:port"),
        ({"replica_lease_seconds": 0.5}, "replica_lease_seconds must be 1 to 22.5"),
        ({"replica_lease_seconds": 30}, "documented 30 s (lease + sweep interval"),
        ({"replica_lease_seconds": "soon"}, "invalid value for replica_lease_seconds"),
    ],
)
def test_bad_database_settings_are_one_line_errors_without_the_password(tmp_path, flags, message):
    with pytest.raises(ConfigError) as caught:
        load_config(flags={"workspace_roots": [str(tmp_path)], **flags}, environ={})
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_retry_and_admission_keys_build_the_policy_and_refuse_bad_values():
    from helix_runner.config import retry_defaults
    from helix_runner.phases.service import admission_limits

    cfg = load_config(flags={"retry_max_attempts": 5, "retry_initial_backoff_seconds": 0.5,
                             "max_running_phases": 4, "max_starting_phases": 2}, environ={})
    policy = retry_defaults(cfg)
    assert (policy.max_attempts, policy.initial_backoff_s) == (5, 0.5)
    limits = admission_limits(cfg)
    assert (limits.max_running, limits.max_starting) == (4, 2)
    assert admission_limits(load_config(flags={"max_concurrent_phases": 7}, environ={})).max_running == 7
    with pytest.raises(ConfigError, match="retry.max_attempts"):
        load_config(flags={"retry_max_attempts": 11}, environ={})
    with pytest.raises(ConfigError, match="max_starting_phases"):
        load_config(flags={"max_starting_phases": 0}, environ={})


def test_the_replica_lease_comes_from_file_env_or_flag_and_keeps_the_takeover_bound(tmp_path):
    from helix_runner.store.protocol import TAKEOVER_BOUND_SECONDS, sweep_interval_seconds

    roots = {"workspace_roots": [str(tmp_path)]}
    assert load_config(flags=roots, environ={}).replica_lease_seconds == 15.0
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text("replica_lease_seconds = 6\n")
    assert load_config(flags=roots, environ={}, config_file=cfg_file).replica_lease_seconds == 6.0
    env = {"HELIX_RUNNER_REPLICA_LEASE_SECONDS": "3"}
    assert load_config(flags=roots, environ=env, config_file=cfg_file).replica_lease_seconds == 3.0
    cfg = load_config(flags={**roots, "replica_lease_seconds": 22.5}, environ=env, config_file=cfg_file)
    # The longest lease still keeps a dead replica's phases within the documented bound.
    assert cfg.replica_lease_seconds + sweep_interval_seconds(cfg.replica_lease_seconds) == TAKEOVER_BOUND_SECONDS


def test_gateway_and_egress_keys_from_file_and_environment(tmp_path):
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text(
        f'workspace_roots = ["{tmp_path}"]\n'
        'egress_allowlist = ["pypi.org", "*.pythonhosted.org"]\negress_private_allow = ["registry.internal:8080"]\n'
        '[model_allowlist]\ndefault = ["claude-sonnet-4-5*"]\n"*" = ["claude-haiku-*"]\n')
    env = {"HELIX_RUNNER_EGRESS_ALLOWED_PORTS": "443,8443", "HELIX_RUNNER_API_UPSTREAM_URL": "https://gw.example.com/a"}
    cfg = load_config(environ=env, config_file=cfg_file)
    assert cfg.api_gateway and cfg.egress_proxy  # the defaults
    assert cfg.egress_allowlist == ("pypi.org", "*.pythonhosted.org") and cfg.egress_allowed_ports == (443, 8443)
    assert cfg.model_allowlist == {"default": ("claude-sonnet-4-5*",), "*": ("claude-haiku-*",)}
    assert cfg.api_upstream_url == "https://gw.example.com/a"
    env_json = {"HELIX_RUNNER_MODEL_ALLOWLIST": '{"p1": ["claude-x"]}'}
    assert load_config(flags={"workspace_roots": [str(tmp_path)]}, environ=env_json).model_allowlist == {
        "p1": ("claude-x",)}


@pytest.mark.parametrize(("flags", "message"), [
    ({"api_upstream_url": "http://api.example.com"}, "unencrypted"),
    ({"api_upstream_url": "ftp://x"}, "api_upstream_url"),
    ({"api_upstream_url": "https://u:p@api.example.com"}, "credentials"),
    ({"egress_allowlist": "10.0.0.1"}, "egress_allowlist: '10.0.0.1': IP addresses"),
    ({"egress_allowlist": "example.com:22"}, "port 22 is not allowed"),
    ({"egress_allowed_ports": "0"}, "egress_allowed_ports"),
    ({"egress_private_allow": "registry.internal"}, "egress_private_allow"),
    ({"model_allowlist": '{"default": "claude-x"}'}, "non-empty list"),
    ({"model_allowlist": '{"bad project!": ["x"]}'}, "not a project id"),
    ({"api_gateway_port": 70000}, "api_gateway_port"),
])  # fmt: skip
def test_bad_gateway_and_egress_values_are_one_line_errors(tmp_path, flags, message):
    with pytest.raises(ConfigError, match=message):
        load_config(flags={"workspace_roots": [str(tmp_path)], **flags}, environ={})
    assert load_config(flags={"workspace_roots": [str(tmp_path)], "api_upstream_url": "http://127.0.0.1:8080"},
                       environ={}).api_upstream_url == "http://127.0.0.1:8080"


def test_the_handover_wait_comes_from_file_environment_and_flag_and_must_be_positive(tmp_path):
    roots = {"workspace_roots": [str(tmp_path)]}
    assert load_config(flags=roots, environ={}).handover_wait_seconds == 30.0
    cfg_file = tmp_path / "runner.toml"
    cfg_file.write_text("handover_wait_seconds = 12\n")
    assert load_config(flags=roots, environ={}, config_file=cfg_file).handover_wait_seconds == 12.0
    env = {"HELIX_RUNNER_HANDOVER_WAIT_SECONDS": "5"}
    assert load_config(flags=roots, environ=env, config_file=cfg_file).handover_wait_seconds == 5.0
    assert load_config(flags={**roots, "handover_wait_seconds": 2}, environ=env).handover_wait_seconds == 2.0
    with pytest.raises(ConfigError, match="handover_wait_seconds must be positive"):
        load_config(flags={**roots, "handover_wait_seconds": 0}, environ={})


# Every key that names a path, with a relative value the server resolves against its start directory
# (a relative --data-dir once turned the whole sandbox off: the shim runs in another directory).
RELATIVE_PATHS = {
    "data_dir": "data", "auth_token_file": "secrets/token", "offline_script": "script.json",
    "api_key_file": "secrets/key", "api_upstream_ca_file": "ca.pem", "sandbox_home_template": "template",
    "tls_cert_file": "pki/cert.pem", "tls_key_file": "pki/key.pem", "tls_client_ca_file": "pki/ca.pem",
    "webhook_ca_file": "webhook-ca.pem", "workspace_roots": "ws", "path_prefix": "venv/bin",
    "sandbox_read_paths": "runtime", "egress_upstream_ca_file": "internal-ca.pem", "vault_key_file": "secrets/vault",
    "auth_principals_file": "secrets/principals.toml",
}


@pytest.mark.parametrize("key", sorted(RELATIVE_PATHS))
def test_a_relative_path_is_made_absolute_once_against_the_start_directory(tmp_path, monkeypatch, key):
    from helix_runner.config import PATH_KEYS, PATH_TUPLE_KEYS, ServerConfig, absolute_paths

    assert set(RELATIVE_PATHS) == {*PATH_KEYS, *PATH_TUPLE_KEYS}  # a new path key gets a row here
    start = tmp_path / "start"
    start.mkdir()
    monkeypatch.chdir(start)
    value = "../" + RELATIVE_PATHS[key]  # as `serve --data-dir ../data` was given
    from pathlib import Path

    raw = (Path(value),) if key in PATH_TUPLE_KEYS else Path(value)
    config = absolute_paths(ServerConfig(**{key: raw}))
    got = getattr(config, key)
    want = tmp_path / RELATIVE_PATHS[key]
    assert got == ((want,) if key in PATH_TUPLE_KEYS else want), got
    monkeypatch.chdir(tmp_path)  # later directory changes do not move it
    assert getattr(config, key) == got


def test_relative_paths_given_as_flags_env_or_file_are_absolute_after_loading(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    (tmp_path / "script.json").write_text("{}")
    (tmp_path / "hooks.secret").write_text("s" * 32)
    file = tmp_path / "runner.toml"
    file.write_text('offline_script = "script.json"\n[[webhooks]]\nid = "w"\nurl = "https://hooks.example.com/x"\n'
                    'events = ["phase.finished"]\nsecret_file = "hooks.secret"\n')
    cfg = load_config(flags={"data_dir": "../d", "workspace_roots": ["ws"], "claude_path": "bin/claude"},
                      environ={"HELIX_RUNNER_API_KEY_FILE": "key"}, config_file=file)
    assert cfg.data_dir == tmp_path.parent / "d"
    assert cfg.workspace_roots == ((tmp_path / "ws").resolve(),)
    assert cfg.claude_path == str(tmp_path / "bin" / "claude")
    assert cfg.api_key_file == tmp_path / "key" and cfg.offline_script == tmp_path / "script.json"
    assert cfg.webhooks[0]["secret_file"] == str(tmp_path / "hooks.secret")
    assert load_config(flags={"claude_path": "claude", "workspace_roots": ["ws"]}).claude_path == "claude"  # on PATH


def test_the_sandbox_limit_keys(tmp_path):
    cfg = load_config(flags={"workspace_roots": [str(tmp_path)]},
                      environ={"HELIX_RUNNER_SANDBOX_REQUIRED_LAYERS": "network,landlock,seccomp",
                               "HELIX_RUNNER_DEFAULT_PIDS_LIMIT": "512", "HELIX_RUNNER_PHASE_OUTPUT_MAX_BYTES": "64MiB",
                               "HELIX_RUNNER_PHASE_TMP_MAX_BYTES": "0"})
    assert cfg.sandbox_required_layers == ("network", "landlock", "seccomp")
    assert (cfg.default_pids_limit, cfg.phase_output_max_bytes, cfg.phase_tmp_max_bytes) == (512, 64 << 20, 0)
    for env, words in (({"HELIX_RUNNER_SANDBOX_REQUIRED_LAYERS": "network,bogus"}, "sandbox_required_layers"),
                       ({"HELIX_RUNNER_DEFAULT_PIDS_LIMIT": "3"}, "default_pids_limit"),
                       ({"HELIX_RUNNER_PHASE_OUTPUT_MAX_BYTES": "1KiB"}, "phase_output_max_bytes")):
        with pytest.raises(ConfigError, match=words):
            load_config(flags={"workspace_roots": [str(tmp_path)]}, environ=env)

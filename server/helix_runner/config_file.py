"""How a TOML config file names the server's settings: one section per part of the server.

A file groups keys in sections (``[sandbox] mode = "required"``, ``[gateway] port = 8443``); each
section is what one component of the server reads (``server.py`` builds them in this order). The
flat keys of older files (``sandbox = "required"``, ``api_gateway_port = 8443``) keep working, and
each one read yields a notice naming its new spelling. Flags and ``HELIX_RUNNER_*`` variables stay
flat: ``HELIX_RUNNER_SANDBOX_HOME_TEMPLATE`` is section and key joined, as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Section -> (flat key, its name inside the section). The flat key is the ServerConfig field, the
# flag (with dashes) and the environment variable (upper case, HELIX_RUNNER_ prefix).
SECTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "server": (
        ("host", "host"), ("port", "port"), ("auth_token_file", "auth_token_file"),
        ("auth_principals_file", "auth_principals_file"),
        ("tls_cert_file", "tls_cert_file"), ("tls_key_file", "tls_key_file"),
        ("tls_client_ca_file", "tls_client_ca_file"), ("tls_server_name", "tls_server_name"),
        ("health_port", "health_port"), ("reuse_port", "reuse_port"), ("read_cache_jobs", "read_cache_jobs"),
        ("log_level", "log_level"), ("log_format", "log_format"), ("drain_grace_seconds", "drain_grace_seconds"),
    ),
    "storage": (
        ("data_dir", "data_dir"), ("database_url", "database_url"), ("retention_days", "retention_days"),
        ("recordings_max_bytes", "recordings_max_bytes"), ("retention_interval_seconds", "retention_interval_seconds"),
    ),
    "cluster": (
        ("replica_id", "replica_id"), ("replica_lease_seconds", "replica_lease_seconds"),
        ("advertise_address", "advertise_address"), ("place_on_free_replica", "place_on_free_replica"),
        ("handover_wait_seconds", "handover_wait_seconds"),
        ("cluster_max_running_phases", "max_running_phases"),
        ("cluster_max_running_phases_per_project", "max_running_phases_per_project"),
        ("cluster_max_queued_phases", "max_queued_phases"),
    ),
    "phases": (
        ("workspace_roots", "workspace_roots"), ("claude_path", "claude_path"), ("inherit_env", "inherit_env"),
        ("request_env_allowlist", "request_env_allowlist"), ("path_prefix", "path_prefix"),
        ("required_commands", "required_commands"), ("allow_bypass_permissions", "allow_bypass_permissions"),
        ("default_phase_timeout_seconds", "default_timeout_seconds"),
        ("default_idle_timeout_seconds", "default_idle_timeout_seconds"),
        ("exit_grace_seconds", "exit_grace_seconds"), ("max_line_bytes", "max_line_bytes"),
        ("worktree_retention", "worktree_retention"), ("warm_pool", "warm_pool"),
        ("price_overrides", "price_overrides"), ("offline_script", "offline_script"),
        ("spawn_off_loop", "spawn_off_loop"), ("checkpoints", "checkpoints"),
    ),
    "admission": (
        ("max_concurrent_phases", "max_concurrent_phases"), ("max_running_phases", "max_running_phases"),
        ("max_running_phases_per_project", "max_running_phases_per_project"),
        ("max_starting_phases", "max_starting_phases"), ("max_queued_phases", "max_queued_phases"),
        ("max_queued_phases_per_project", "max_queued_phases_per_project"),
        ("admission_max_loop_lag_ms", "max_loop_lag_ms"),
    ),
    "retry": (
        ("retry_max_attempts", "max_attempts"), ("retry_initial_backoff_seconds", "initial_backoff_seconds"),
        ("retry_backoff_multiplier", "backoff_multiplier"), ("retry_max_backoff_seconds", "max_backoff_seconds"),
        ("retry_continuation_prompt", "continuation_prompt"),
    ),
    "sandbox": (
        ("sandbox", "mode"), ("sandbox_home_template", "home_template"), ("sandbox_read_paths", "read_paths"),
        ("sandbox_skip_layers", "skip_layers"), ("sandbox_required_layers", "required_layers"),
        ("default_pids_limit", "default_pids_limit"), ("phase_output_max_bytes", "phase_output_max_bytes"),
        ("phase_tmp_max_bytes", "phase_tmp_max_bytes"), ("workspace_max_bytes", "workspace_max_bytes"),
    ),
    "containment": (
        ("containment", "mode"), ("cgroup_parent", "cgroup_parent"),
        ("default_memory_limit_bytes", "default_memory_limit_bytes"),
        ("default_cpu_limit_millicores", "default_cpu_limit_millicores"),
    ),
    "gateway": (
        ("api_gateway", "enabled"), ("api_gateway_port", "port"), ("api_key_file", "api_key_file"),
        ("api_key_helper", "api_key_helper"), ("api_upstream_url", "upstream_url"),
        ("api_upstream_ca_file", "upstream_ca_file"), ("model_allowlist", "model_allowlist"),
        ("api_features_allow", "features_allow"),
    ),
    "egress": (
        ("egress_proxy", "enabled"), ("egress_proxy_port", "port"), ("egress_allowlist", "allowlist"),
        ("egress_allowed_ports", "allowed_ports"), ("egress_private_allow", "private_allow"),
        ("egress_upstream_ca_file", "upstream_ca_file"), ("vault_key_file", "vault_key_file"),
        ("egress_max_connections_per_phase", "max_connections_per_phase"),
        ("egress_max_bytes_per_phase", "max_bytes_per_phase"),
        ("egress_hold_timeout_seconds", "hold_timeout_seconds"),
    ),
    "telemetry": (
        ("metrics_host", "metrics_host"), ("metrics_port", "metrics_port"),
        ("metrics_max_projects", "metrics_max_projects"), ("tracing", "tracing"),
    ),
    "web": (("web_port", "port"), ("web_host", "host"), ("dashboard_url", "dashboard_url")),
    # `[[webhooks]]` (the subscriptions, an array of tables) stays at the top: TOML cannot have a
    # `[webhooks]` table beside it, so how they are delivered is a section of its own.
    "webhook_delivery": (
        ("webhook_private_allow", "private_allow"), ("webhook_max_attempts", "max_attempts"),
        ("webhook_initial_backoff_seconds", "initial_backoff_seconds"),
        ("webhook_backoff_multiplier", "backoff_multiplier"), ("webhook_max_backoff_seconds", "max_backoff_seconds"),
        ("webhook_timeout_seconds", "timeout_seconds"), ("webhook_max_response_bytes", "max_response_bytes"),
        ("webhook_ca_file", "ca_file"),
    ),
}
# Keys that stay at the top of a file, not deprecated.
TOP_LEVEL = ("webhooks",)

SECTION_OF: dict[str, tuple[str, str]] = {
    flat: (section, name) for section, keys in SECTIONS.items() for flat, name in keys
}


class ConfigFileError(ValueError):
    """A key the file may not hold; the message names it."""


def spelling(flat: str) -> str:
    """How a file writes ``flat`` now: ``[section] name``."""
    section, name = SECTION_OF[flat]
    return f"[{section}] {name}"


def flatten(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The file's values by flat key, and a notice for each flat key it used outside its section.

    A key given both ways (flat and in its section) is an error: which one wins would be a guess.
    """
    values: dict[str, Any] = {}
    notices: list[str] = []
    for key, value in raw.items():
        norm = key.replace("-", "_")
        if norm in SECTIONS and isinstance(value, Mapping):
            names = {name: flat for flat, name in SECTIONS[norm]}
            for inner, inner_value in value.items():
                flat = names.get(inner.replace("-", "_"))
                if flat is None:
                    raise ConfigFileError(f"unknown key {inner!r} in section [{norm}]")
                if flat in values:
                    raise ConfigFileError(f"{flat} is given twice: as {spelling(flat)} and as the flat key {flat}")
                values[flat] = inner_value
            continue
        if norm in TOP_LEVEL:
            values[norm] = value
            continue
        if norm not in SECTION_OF:
            raise ConfigFileError(f"unknown key {key!r}")
        if norm in values:
            raise ConfigFileError(f"{norm} is given twice: as {spelling(norm)} and as the flat key {norm}")
        values[norm] = value
        notices.append(f"the flat key {key} is deprecated: write it as {spelling(norm)}")
    return values, notices

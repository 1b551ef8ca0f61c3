"""What confines each phase ([containment], [sandbox]): its process containment and its sandbox,
detected and probed once at start, with what this host leaves unenforced said in the log.
"""

from __future__ import annotations

import logging
from pathlib import Path

from helix_runner.config import ServerConfig
from helix_runner.process.containment import MODE_NAMES, Containment, ContainmentError, detect, instance_id
from helix_runner.process.git_worktree import worktrees_dir
from helix_runner.process.host_git import HOST_GIT
from helix_runner.process.key_broker import KeyBroker
from helix_runner.process.sandbox.detect import SandboxBroken
from helix_runner.process.sandbox.phase_sandbox import Sandbox
from helix_runner.server.lifecycle import StartupError
from helix_runner.server.model_access import ChildCredentials, egress_ports

log = logging.getLogger(__name__)


def detect_containment(config: ServerConfig) -> Containment:
    """The containment of phases (process/containment.py), logged with what it can and cannot do."""
    try:
        containment = detect(config.containment, config.cgroup_parent, instance_id(config.data_dir))
    except ContainmentError as exc:
        raise StartupError(f"phase containment: {exc}") from None
    # One short line (it comes first, also before any start-up error); the cgroup paths and the
    # reasons a cgroup was not usable are the detail: debug, or a warning when auto fell back.
    fields = {"mode": MODE_NAMES[containment.mode], "limits": list(containment.limits_available)}
    log.info("containment", extra={"fields": fields})
    if fields["mode"] == "subreaper" and config.containment == "auto":
        log.warning("no usable cgroup: phases are contained by a subreaper shim, without memory or cpu limits",
                    extra={"fields": {"detail": containment.detail}})
    else:
        log.debug("containment detail", extra={"fields": {"setting": config.containment,
                                                           "detail": containment.detail}})
    for name, value in (("memory", config.default_memory_limit_bytes), ("cpu", config.default_cpu_limit_millicores)):
        if value and name not in containment.limits_available:
            log.warning("default limit not enforced: no cgroup with this controller",
                        extra={"fields": {"limit": name, "value": value}})
    return containment


def warn_about_phase_limits(config: ServerConfig, containment: Containment, sandbox: Sandbox | None) -> None:
    """Logs what this host leaves unenforced of the per-phase limits and of the file layer."""
    if config.default_pids_limit and "pids" not in containment.limits_available and not (
            sandbox is not None and sandbox.enforces_nproc):
        log.warning("default limit not enforced: no pids cgroup and no user namespace per phase",
                    extra={"fields": {"limit": "pids", "value": config.default_pids_limit}})
    if sandbox is not None and sandbox.on and not sandbox.layers.bwrap and sandbox.layers.landlock_abi:
        holding = [str(r) for r in config.workspace_roots if config.data_dir.resolve().is_relative_to(r)]
        if holding:  # Landlock cannot hide it inside an allowed directory: phases there are refused
            log.warning("the data dir lies inside a workspace root: without bubblewrap, a phase whose directory "
                        "holds it is refused (SANDBOX_WORKDIR_UNREACHABLE); keep the data dir outside the roots",
                        extra={"fields": {"data_dir": str(config.data_dir), "roots": holding}})


def start_sandbox(config: ServerConfig, server_env: dict[str, str], creds: ChildCredentials,
                   key_broker: KeyBroker | None) -> Sandbox | None:
    """The per-phase sandbox (process/sandbox/), detected and probed once; None when it is off and
    the phases need no private home either (offline mode always gets one)."""
    if config.sandbox == "off" and creds.offline_api is None:
        log.warning("sandbox", extra={"fields": {"setting": "off", "layers": "none: every phase runs with the "
                                                 "server's view of files, processes and network"}})
        return None
    ports, note = egress_ports(config, server_env, creds)
    hidden = [p for p in (config.auth_token_file, config.auth_principals_file, config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file,
                          config.api_key_file) if p is not None]
    try:
        return Sandbox.start(config.sandbox, data_dir=config.data_dir, skip=config.sandbox_skip_layers,
                             egress_ports=ports, egress_note=note, template=config.sandbox_home_template,
                             read_paths=config.sandbox_read_paths, hidden=hidden,
                             required_layers=config.sandbox_required_layers, tmp_max_bytes=config.phase_tmp_max_bytes,
                             transcripts_max_bytes=config.phase_output_max_bytes)
    except OSError as exc:
        raise StartupError(f"cannot set up the phase sandbox: {exc.strerror or exc}") from None
    except SandboxBroken as exc:  # sandbox = auto degrades only layers the host lacks
        raise StartupError(f"cannot set up the phase sandbox: {exc}") from None


def box_host_git(config: ServerConfig) -> None:
    """The server's own git runs in a helper sandbox of its own (process/host_git.py): the data dir,
    the server's home and its secret files hidden, the workspace roots visible, no network. Without
    bubblewrap it is a Landlock domain (an allowlist, with gaps the log names); with neither, only
    git's overrides protect, and the log says so."""
    secrets = [p for p in (config.auth_token_file, config.auth_principals_file, config.tls_key_file,
                           config.api_key_file) if p is not None]
    # The phases' worktrees (data dir) stay visible: git checks every worktree of a repository it
    # prunes, and one it cannot see is taken for deleted (its administration removed under it).
    # The layers this host is told it lacks (sandbox_skip_layers) are left out here too: without
    # namespaces no bubblewrap, without landlock no Landlock domain.
    skip = set(config.sandbox_skip_layers)
    note = HOST_GIT.configure(hidden=[config.data_dir, Path.home(), *secrets],
                              visible=[*config.workspace_roots, worktrees_dir(config.data_dir)],
                              bwrap="/nonexistent/bwrap" if "namespaces" in skip else None,
                              use_landlock="landlock" not in skip)
    if note:
        log.warning("host git: the server's own git calls run without their helper sandbox; a program a "
                    "repository names that git's overrides miss would run as the server",
                    extra={"fields": {"reason": note}})
    elif HOST_GIT.kind == "landlock":
        shown = [str(s) for s in secrets if any(s.absolute().is_relative_to(r) for r in config.workspace_roots)]
        log.warning("host git: bubblewrap cannot run here; the server's git runs in a Landlock domain (the "
                    "system's directories, the workspace roots and the phases' worktrees readable, no TCP), which "
                    "does not stop UDP or a named unix socket, and hides no file inside a workspace root",
                    extra={"fields": {"sandbox": "landlock", "secrets_inside_roots": shown}})
    else:
        log.info("host git", extra={"fields": {"sandbox": "bubblewrap", "hidden": len(secrets) + 2}})

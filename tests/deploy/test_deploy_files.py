"""Offline checks of the Dockerfile and the Kubernetes manifests.

No Docker engine or cluster is available to CI, so the image and manifests are linted and
schema-validated, and the facts the service depends on at run time (probe service names, the
shutdown budget, non-root, tini as PID 1) are asserted directly.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"  # one replica on SQLite; K8S's kustomization is just this base
REPLICAS = K8S / "replicas"  # the overlay: N replicas on PostgreSQL with mutual TLS
DOCKERFILE = ROOT / "Dockerfile"
# Not resolved: in a venv, sys.executable is the venv's bin/python symlink, and that bin dir
# holds the dev extra's hadolint, yamllint and kubernetes-validate.
BIN = Path(sys.executable).parent

# Oldest release with lifecycle.preStop.sleep on by default (beta), and the one where it is GA.
KUBERNETES_VERSIONS = ("1.30.0", "1.34.0")
MANIFESTS = sorted(p for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
# The overlay's complete manifests; its *-patch.yaml files are partial objects, validated rendered,
# and certificate.example.yaml is cert-manager's CRDs (no schema here), like monitoring/.
REPLICA_PATCHES = sorted(REPLICAS.glob("*-patch.yaml"))
REPLICA_MANIFESTS = sorted(
    p
    for p in REPLICAS.glob("*.yaml")
    if p.name not in ("kustomization.yaml", "certificate.example.yaml") and p not in REPLICA_PATCHES
)
HEALTH_PORT = 50052

PORT = 50051
METRICS_PORT = 9464
MONITORING = K8S / "monitoring"
DASHBOARD = ROOT / "deploy" / "grafana" / "helix-runner-dashboard.json"
# SIGTERM -> wait -> SIGKILL of each phase's process group, recording it INTERRUPTED, final events.
CHILD_TEARDOWN_MIN_SECONDS = 10


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} not found in {BIN}; install the project's dev extra")
    return str(path)


def load(name: str, folder: Path = BASE) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((folder / name).read_text()) if doc]


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (ln.strip().partition(" ") for ln in joined.splitlines() if ln.strip())
    ]


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in dockerfile():
        if instruction == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(args))
    return env


def statefulset() -> dict:
    (sts,) = load("statefulset.yaml")
    return sts


def container() -> dict:
    (c,) = statefulset()["spec"]["template"]["spec"]["containers"]
    return c


def config_toml() -> dict:
    """The ConfigMap's config.toml by flat key; it is written in sections, with no deprecated key."""
    from helix_runner.config_file import flatten

    (cm,) = load("configmap.yaml")
    values, notices = flatten(tomllib.loads(cm["data"]["config.toml"]))
    assert notices == []
    return values


# --- linters and schema validation -----------------------------------------------------------


def test_hadolint() -> None:
    # Failure threshold and the justified ignores live in .hadolint.yaml.
    result = run(tool("hadolint"), "--no-color", "--config", ".hadolint.yaml", "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint() -> None:
    result = run(
        tool("yamllint"), "--strict", "-c", ".yamllint.yaml", "deploy", ".yamllint.yaml", ".hadolint.yaml"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_validate() -> None:
    # The schemas ship inside the package, so this needs no network. --strict rejects unknown
    # fields (typos would otherwise be silently dropped by the API server). A kind without a
    # schema only warns and exits 0, so any output at all counts as a failure.
    versions = [arg for v in KUBERNETES_VERSIONS for arg in ("-k", v)]
    files = [str(p.relative_to(ROOT)) for p in MANIFESTS + REPLICA_MANIFESTS]
    result = run(tool("kubernetes-validate"), "--strict", "--quiet", *versions, *files)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    (kustomization,) = load("kustomization.yaml")
    expected = {p.name for p in MANIFESTS} - {"secret.example.yaml"}
    assert set(kustomization["resources"]) == expected
    (top,) = load("kustomization.yaml", K8S)
    assert top["resources"] == ["base"]
    (overlay,) = load("kustomization.yaml", REPLICAS)
    assert overlay["resources"] == ["../base"] + [
        p.name for p in REPLICA_MANIFESTS if "example" not in p.name
    ]
    assert sorted(p["path"] for p in overlay["patches"]) == [p.name for p in REPLICA_PATCHES]


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (for its built-in kustomize) not installed"
)
@pytest.mark.parametrize("folder", [K8S, REPLICAS], ids=["one-replica", "replicas"])
def test_kustomize_build_validates(tmp_path: Path, folder: Path) -> None:
    built = run("kubectl", "kustomize", str(folder.relative_to(ROOT)))
    assert built.returncode == 0, built.stderr
    # A file, not stdin: kubernetes-validate reads "-" once and fails on the second -k version.
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(built.stdout)
    versions = [arg for v in KUBERNETES_VERSIONS for arg in ("-k", v)]
    result = run(tool("kubernetes-validate"), "--strict", "--quiet", *versions, str(rendered))
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
    namespaced = [d for d in yaml.safe_load_all(built.stdout) if d["kind"] != "Namespace"]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"helix-runner"}


# --- facts the service relies on -------------------------------------------------------------


def test_probes_use_the_liveness_and_readiness_health_services_on_the_api_port() -> None:
    c = container()
    probes = {name: c[name]["grpc"] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes == {
        "startupProbe": {"port": PORT, "service": "liveness"},
        "livenessProbe": {"port": PORT, "service": "liveness"},
        "readinessProbe": {"port": PORT, "service": "readiness"},
    }
    assert c["ports"] == [
        {"name": "grpc", "containerPort": PORT},
        {"name": "metrics", "containerPort": METRICS_PORT},
    ]
    assert config_toml()["port"] == PORT
    assert ("EXPOSE", str(PORT)) in dockerfile()


def test_services_target_the_api_port() -> None:
    services = {s["metadata"]["name"]: s["spec"] for s in load("service.yaml")}
    assert services["helix-runner-headless"]["clusterIP"] == "None"
    assert statefulset()["spec"]["serviceName"] == "helix-runner-headless"
    for spec in services.values():
        assert [(p["port"], p["targetPort"]) for p in spec["ports"]] == [(PORT, "grpc")]
    (policy,) = load("networkpolicy.yaml")
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": PORT}]},
        {"ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
    ]


def test_container_runs_as_the_images_non_root_user() -> None:
    pod = statefulset()["spec"]["template"]["spec"]["securityContext"]
    users = [args for instruction, args in dockerfile() if instruction == "USER"]
    # Numeric, so the kubelet can enforce runAsNonRoot against the image itself.
    assert users[-1] == f"{pod['runAsUser']}:{pod['runAsGroup']}"
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container()["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_every_path_the_service_writes_is_a_volume() -> None:
    # The root filesystem is read-only, so HOME (the CLI's ~/.claude), /tmp, the data dir and
    # the workspace root must each be mounted.
    env = docker_env()
    mounts = {m["mountPath"] for m in container()["volumeMounts"] if not m.get("readOnly")}
    assert {
        env["HOME"],
        "/tmp",
        env["HELIX_RUNNER_DATA_DIR"],
        *env["HELIX_RUNNER_WORKSPACE_ROOTS"].split(":"),
    } <= mounts


def test_entrypoint_is_tini_in_exec_form() -> None:
    entrypoints = [args for instruction, args in dockerfile() if instruction == "ENTRYPOINT"]
    assert len(entrypoints) == 1
    assert entrypoints[0].startswith("["), "shell form would put /bin/sh, not tini, at PID 1"
    argv = json.loads(entrypoints[0])
    assert Path(argv[0]).name == "tini" and argv[1] == "--" and argv[2] == "helix-runner"


def test_base_image_is_pinned_and_shared_by_both_stages() -> None:
    # hadolint cannot check a tag that comes from an ARG.
    instructions = dockerfile()
    args = dict(a.split("=", 1) for i, a in instructions if i == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", args["PYTHON_IMAGE"])
    froms = [a.split()[0] for i, a in instructions if i == "FROM"]
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_shutdown_budget_fits_the_termination_grace_period() -> None:
    pod = statefulset()["spec"]["template"]["spec"]
    c = container()
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    drain = int(env["HELIX_RUNNER_DRAIN_GRACE_SECONDS"])
    assert pre_stop + drain < pod["terminationGracePeriodSeconds"]
    assert pre_stop + drain + CHILD_TEARDOWN_MIN_SECONDS <= pod["terminationGracePeriodSeconds"]


def test_secrets_reach_the_container_as_intended() -> None:
    c = container()
    (api_key,) = [e for e in c["env"] if e["name"] == "ANTHROPIC_API_KEY"]
    assert api_key["valueFrom"]["secretKeyRef"] == {"name": "helix-runner", "key": "anthropic-api-key"}
    # The token is a file, never an env var, so the env allowlist cannot hand it to a child.
    secret_keys = [e["valueFrom"]["secretKeyRef"]["key"] for e in c["env"] if "valueFrom" in e]
    assert "auth-token" not in secret_keys
    token_path = Path(config_toml()["auth_token_file"])
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == str(token_path.parent)]
    (volume,) = [
        v for v in statefulset()["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
    ]
    assert volume["secret"]["secretName"] == "helix-runner"
    assert volume["secret"]["items"] == [{"key": "auth-token", "path": token_path.name}]
    # The key stays in the server: the children hold a capability for its gateway, never the key.
    assert config_toml()["api_gateway"] is True and config_toml()["egress_proxy"] is True


def test_retention_is_configured_and_valid() -> None:
    from helix_runner.config import load_config

    cfg = config_toml()
    assert cfg["retention_days"] > 0 and cfg["recordings_max_bytes"] > 0
    load_config(flags={k: cfg[k] for k in ("retention_days", "recordings_max_bytes")}, environ={})


def test_config_keys_are_known_to_the_server() -> None:
    # The server refuses to start on an unknown config.toml key, and silently ignores an
    # unknown HELIX_RUNNER_* variable, so a renamed key would break or quietly undo the deployment.
    config = pytest.importorskip("helix_runner.config")
    env_names = {e["name"] for e in container()["env"]} | set(docker_env())
    env_keys = {n.removeprefix("HELIX_RUNNER_").lower() for n in env_names if n.startswith("HELIX_RUNNER_")}
    assert set(config_toml()) <= set(config.KEYS)
    assert env_keys - {"config"} <= set(config.KEYS)


def test_readme_docker_run_recipe_matches_the_image() -> None:
    # Docker is not available to CI either, so the README's recipe is checked against the
    # Dockerfile: every volume mounted, the port published on loopback only, a token file
    # mounted where HELIX_RUNNER_AUTH_TOKEN_FILE points (the image binds 0.0.0.0).
    config = pytest.importorskip("helix_runner.config")
    readme = (ROOT / "README.md").read_text()
    (recipe,) = re.findall(r"docker run .*?(?=\n[^ ]|\Z)", readme.replace("\\\n", " "))
    argv = shlex.split(recipe.replace('"$PWD', '"/pwd'))
    options = list(zip(argv, [*argv[1:], ""], strict=True))
    volumes = [value.split(":")[1] for flag, value in options if flag == "-v"]
    env = dict(value.split("=", 1) for flag, value in options if flag == "-e" and "=" in value)
    (volume_args,) = [args for instruction, args in dockerfile() if instruction == "VOLUME"]
    assert set(json.loads(volume_args)) <= set(volumes)
    assert [value for flag, value in options if flag == "-p"] == [f"127.0.0.1:{PORT}:{PORT}"]
    assert env["HELIX_RUNNER_AUTH_TOKEN_FILE"] in volumes
    assert {n.removeprefix("HELIX_RUNNER_").lower() for n in env} <= set(config.KEYS)
    assert docker_env()["HELIX_RUNNER_HOST"] == "0.0.0.0"


def test_the_readme_docker_sections_token_directory_is_git_ignored() -> None:
    """Issue 22 item 15: the Docker section writes a bearer token to secrets/, which git would commit."""
    readme = (ROOT / "README.md").read_text()
    assert "> secrets/token" in readme
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "secrets/token"], cwd=ROOT, check=False, timeout=30
    )
    assert ignored.returncode == 0


def test_the_image_builds_the_python_client_into_the_servers_wheel() -> None:
    # helix-runner ships the Python client its command uses (issue 22, item 6: a dependency on
    # helix-runner-client would be resolved from an index where this project does not own the name).
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dependencies = [*project["project"]["dependencies"], *project["project"]["optional-dependencies"]["dev"]]
    assert not any(d.startswith(("helix-runner-client", "helix_runner_client")) for d in dependencies)
    assert "clients/python/src" in project["tool"]["setuptools"]["packages"]["find"]["where"]
    instructions = dockerfile()
    assert ("COPY", "clients/python/ clients/python/") in instructions
    (build,) = [args for word, args in instructions if word == "RUN" and "pip wheel" in args]
    assert "--no-deps --wheel-dir /dist . " in build
    allowed = set((ROOT / ".dockerignore").read_text().splitlines())
    assert "!clients/python/src/" in allowed


# --- metrics: scraping and the dashboard -----------------------------------------------------


def test_metrics_endpoint_agrees_across_config_pod_and_scrape_annotations() -> None:
    toml = config_toml()
    # The server listens on loopback unless told otherwise; in a pod the scraper comes from outside.
    assert (toml["metrics_host"], toml["metrics_port"]) == ("0.0.0.0", METRICS_PORT)
    annotations = statefulset()["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(METRICS_PORT),
        "prometheus.io/path": "/metrics",
    }


def test_podmonitor_example_scrapes_the_metrics_port_of_the_pods() -> None:
    (monitor,) = load("podmonitor.yaml", MONITORING)
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    pod_labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert monitor["metadata"]["namespace"] == "helix-runner"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container()["ports"] if p["containerPort"] == METRICS_PORT}
    assert endpoint["path"] == "/metrics"
    # A CRD: only where the operator is installed, so never part of the kustomization.
    (kustomization,) = load("kustomization.yaml")
    assert not any("monitoring" in r for r in kustomization["resources"])


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    queries += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries


def test_dashboard_queries_name_only_exported_metrics() -> None:
    metrics = pytest.importorskip("helix_runner.telemetry.metrics").Metrics()
    metrics.watch(list, int)  # the watcher families are exported by a collector
    exported = metrics.sample_names()
    used: set[str] = set()
    for query in dashboard_queries():
        names = set(re.findall(r"\b((?:helix|grpc_server|process)_[a-z0-9_]+)\b", query))
        assert names, f"query names no metric: {query}"
        assert names <= exported, f"not exported: {names - exported} in {query}"
        used |= names
    # Every helix_ metric family has a panel (web searches are rare; tokens and cost cover them).
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported if n.startswith("helix_")}
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    assert families - shown == {"helix_web_search_requests_total"}


def test_dashboard_is_a_grafana_dashboard_with_a_datasource_variable() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "helix-runner" and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


# --- replicas/: N replicas on PostgreSQL with mutual TLS ---------------------------------------


def replica_patch() -> dict:
    (patch,) = load("statefulset-patch.yaml", REPLICAS)
    return patch


def replica_container() -> dict:
    (c,) = replica_patch()["spec"]["template"]["spec"]["containers"]
    assert c["name"] == container()["name"]  # the patch merges into the base's container
    return c


def replica_env() -> dict[str, dict]:
    return {e["name"]: e for e in replica_container()["env"]}


def test_replicas_are_named_by_their_pod_and_reachable_at_its_ip() -> None:
    assert replica_patch()["spec"]["replicas"] > 1
    env = replica_env()
    assert env["HELIX_RUNNER_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # $(POD_IP) is expanded only from variables defined earlier in the list.
    names = [e["name"] for e in replica_container()["env"]]
    assert names.index("POD_IP") < names.index("HELIX_RUNNER_ADVERTISE_ADDRESS")
    assert env["HELIX_RUNNER_ADVERTISE_ADDRESS"]["value"] == f"$(POD_IP):{PORT}"
    assert env["HELIX_RUNNER_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "helix-runner-postgres",
        "key": "database-url",
    }
    (secret,) = load("secret.example.yaml", REPLICAS)
    assert secret["metadata"]["name"] == "helix-runner-postgres"
    assert secret["stringData"]["database-url"].startswith("postgresql://")


def test_replica_tls_files_come_from_the_certificate_secret() -> None:
    env = {name: e.get("value") for name, e in replica_env().items()}
    (mount,) = [m for m in replica_container()["volumeMounts"] if m["name"] == "tls"]
    assert mount["readOnly"] is True and "subPath" not in mount  # a renewed Secret reaches the pod
    (volume,) = replica_patch()["spec"]["template"]["spec"]["volumes"]
    assert volume["name"] == "tls"
    keys = {item["path"]: item["key"] for item in volume["secret"]["items"]}
    files = {
        "HELIX_RUNNER_TLS_CERT_FILE": "tls.crt",
        "HELIX_RUNNER_TLS_KEY_FILE": "tls.key",
        "HELIX_RUNNER_TLS_CLIENT_CA_FILE": "ca.crt",
    }
    for name, key in files.items():
        path = Path(env[name])
        assert str(path.parent) == mount["mountPath"] and keys[path.name] == key
    # The certificate (cert-manager example) is that Secret, for the name forwarding expects,
    # usable as server and as client identity.
    certs = {
        d["metadata"]["name"]: d
        for d in load("certificate.example.yaml", REPLICAS)
        if d["kind"] == "Certificate"
    }
    replica_cert = next(
        c for c in certs.values() if c["spec"]["secretName"] == volume["secret"]["secretName"]
    )
    assert env["HELIX_RUNNER_TLS_SERVER_NAME"] in replica_cert["spec"]["dnsNames"]
    assert {"server auth", "client auth"} <= set(replica_cert["spec"]["usages"])


def test_replica_env_configures_a_valid_server(tmp_path: Path) -> None:
    # Every HELIX_RUNNER_* name is a config key, and the values load (with real PEM files in place
    # of the Secret's, since mutual TLS lets the server listen on 0.0.0.0 and the files are checked).
    from support.certs import CertificateAuthority

    from helix_runner.config import KEYS, load_config

    env = {name: e.get("value") for name, e in replica_env().items() if name.startswith("HELIX_RUNNER_")}
    assert {n.removeprefix("HELIX_RUNNER_").lower() for n in env} <= set(KEYS)
    ca = CertificateAuthority(tmp_path / "pki")
    issued = ca.issue("replica", dns=(env["HELIX_RUNNER_TLS_SERVER_NAME"],))
    environ = {
        **{k: v for k, v in env.items() if v is not None},
        "HELIX_RUNNER_TLS_CERT_FILE": str(issued.cert_file),
        "HELIX_RUNNER_TLS_KEY_FILE": str(issued.key_file),
        "HELIX_RUNNER_TLS_CLIENT_CA_FILE": str(ca.ca_file),
        "HELIX_RUNNER_ADVERTISE_ADDRESS": f"10.1.2.3:{PORT}",
        "HELIX_RUNNER_REPLICA_ID": "helix-runner-0",
        "HELIX_RUNNER_DATABASE_URL": "postgresql://helix@db.example/helix",
        "HELIX_RUNNER_HOST": docker_env()["HELIX_RUNNER_HOST"],
        "HELIX_RUNNER_WORKSPACE_ROOTS": str(tmp_path),
    }
    config = load_config(environ=environ)
    assert config.mutual_tls and config.health_port == HEALTH_PORT and not config.is_loopback


def test_replica_probes_use_the_plaintext_health_port() -> None:
    # The kubelet's gRPC probes cannot speak TLS: they go to the health-only port.
    c = replica_container()
    assert int(replica_env()["HELIX_RUNNER_HEALTH_PORT"]["value"]) == HEALTH_PORT
    assert c["ports"] == [{"name": "health", "containerPort": HEALTH_PORT}]
    assert {name: c[name]["grpc"] for name in ("startupProbe", "livenessProbe", "readinessProbe")} == {
        "startupProbe": {"port": HEALTH_PORT, "service": "liveness"},
        "livenessProbe": {"port": HEALTH_PORT, "service": "liveness"},
        "readinessProbe": {"port": HEALTH_PORT, "service": "readiness"},
    }
    (policy,) = load("networkpolicy-patch.yaml", REPLICAS)
    ports = sorted(p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"])
    assert ports == sorted([PORT, METRICS_PORT, HEALTH_PORT])
    # TLS on the API port: the Services must not announce HTTP/2 cleartext.
    for service in load("service-patch.yaml", REPLICAS):
        assert service["spec"]["ports"] == [{"port": PORT, "appProtocol": None}]


def test_replicas_drain_within_the_grace_period_one_at_a_time() -> None:
    grace = replica_patch()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace == statefulset()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    env = {e["name"]: e.get("value") for e in replica_pod_container()["env"]}
    pre_stop = replica_pod_container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop + int(env["HELIX_RUNNER_DRAIN_GRACE_SECONDS"]) + CHILD_TEARDOWN_MIN_SECONDS <= grace
    (pdb,) = load("poddisruptionbudget.yaml", REPLICAS)
    assert pdb["spec"]["maxUnavailable"] == 1 < replica_patch()["spec"]["replicas"]
    pod_labels = statefulset()["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


# Within the drain, after the wait for a tool boundary: stop the CLI (SIGTERM, its exit), mirror
# the last of its transcript, commit a worktree's work in progress, release the phase.
HANDOVER_SAVE_MIN_SECONDS = 10
# More grace than the drain needs only delays a rolling deploy: at most this much beyond it.
GRACE_SLACK_MAX_SECONDS = 30


def replica_pod_container() -> dict:
    """The replicas' container as kustomize renders it: the base's, with the overlay's patch merged."""
    (c,) = _merge(statefulset(), replica_patch())["spec"]["template"]["spec"]["containers"]
    return c


def test_the_replicas_grace_period_and_pre_stop_hold_the_hand_over() -> None:
    # The drain hands each running phase over: it waits up to handover_wait_seconds for the next
    # tool boundary, then saves and releases it, all within drain_grace_seconds; the pod's
    # terminationGracePeriodSeconds holds preStop + that drain + the teardown of what is left.
    from helix_runner.config import KEYS, load_config

    assert "handover_wait_seconds" in KEYS  # the server's setting for the hand-over bound
    c = replica_pod_container()
    env = {e["name"]: e.get("value") for e in c["env"]}
    config = load_config(environ={k: v for k, v in env.items() if k in (
        "HELIX_RUNNER_DRAIN_GRACE_SECONDS", "HELIX_RUNNER_HANDOVER_WAIT_SECONDS")})  # fmt: skip
    wait, drain = config.handover_wait_seconds, config.drain_grace_seconds
    assert (wait, drain) == (float(env["HELIX_RUNNER_HANDOVER_WAIT_SECONDS"]),
                             float(env["HELIX_RUNNER_DRAIN_GRACE_SECONDS"]))  # fmt: skip
    assert 0 < wait and wait + HANDOVER_SAVE_MIN_SECONDS <= drain
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop == container()["lifecycle"]["preStop"]["sleep"]["seconds"]  # the patch restates it
    grace = replica_patch()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    needed = pre_stop + drain + CHILD_TEARDOWN_MIN_SECONDS
    assert needed <= grace <= needed + GRACE_SLACK_MAX_SECONDS
    # The numbers the patch's comment states are the ones it sets.
    text = (REPLICAS / "statefulset-patch.yaml").read_text()
    for number, what in ((pre_stop, "preStop"), (int(drain), "drain grace"), (grace, "the same as the base")):
        assert re.search(rf"#\s+[=+]?\s*{number}\s+{re.escape(what)}", text), (number, what)
    assert f"up to {int(wait)} s waiting" in text


# --- the full per-phase sandbox (deploy/k8s/sandbox) ----------------------------------------------

SANDBOX = K8S / "sandbox"
PROFILE = SANDBOX / "helix-runner-sandbox.json"
# What RuntimeDefault refuses a container without CAP_SYS_ADMIN and bubblewrap or the shim's private
# network need (containerd's and Docker's default profiles gate these on that capability); clone only
# with a namespace flag (a plain fork is a clone too).
NAMESPACE_CALLS = ("unshare", "clone", "mount", "umount2", "pivot_root")


def _merge(base, patch):
    """A strategic merge as kustomize does it for these objects: maps recursively, lists of named
    items (containers, env) by name, other lists replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: _merge(base[k], v) if k in base else v for k, v in patch.items()}}
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(x, dict) and "name" in x for x in base + patch)
    ):
        by_name = {x["name"]: x for x in patch}
        merged = [_merge(x, by_name.pop(x["name"])) if x["name"] in by_name else x for x in base]
        return merged + list(by_name.values())
    return patch


def sandbox_statefulset() -> dict:
    (patch,) = load("statefulset-patch.yaml", SANDBOX)
    return _merge(statefulset(), patch)


def test_the_sandbox_overlay_renders_a_valid_statefulset(tmp_path: Path) -> None:
    (kustomization,) = load("kustomization.yaml", SANDBOX)
    assert kustomization["resources"] == ["../base"]
    assert [p["path"] for p in kustomization["patches"]] == ["statefulset-patch.yaml", "namespace-patch.yaml"]
    (namespace,) = load("namespace.yaml")
    (namespace_patch,) = load("namespace-patch.yaml", SANDBOX)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all([sandbox_statefulset(), _merge(namespace, namespace_patch)]))
    versions = [arg for v in KUBERNETES_VERSIONS for arg in ("-k", v)]
    result = run(tool("kubernetes-validate"), "--strict", "--quiet", *versions, str(rendered))
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_the_sandbox_overlay_states_what_the_sandbox_needs() -> None:
    from helix_runner.config import load_config

    pod = sandbox_statefulset()["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["hostUsers"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": PROFILE.name}
    assert c["securityContext"]["procMount"] == "Unmasked"  # only safe with hostUsers: false
    assert c["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}
    # The rest of the base's hardening stays.
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    overlay = load_config(environ={k: v for k, v in env.items() if k.startswith("HELIX_RUNNER_SANDBOX")})
    assert overlay.sandbox == "required"
    assert set(overlay.sandbox_required_layers) == {"namespaces", "network", "landlock", "seccomp"}
    # The base runs Landlock-only under RuntimeDefault, and says so.
    assert statefulset()["spec"]["template"]["spec"]["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    # It requires what RuntimeDefault leaves (no user namespaces: no bubblewrap): phases never run with less.
    assert config_toml()["sandbox"] == "required"
    assert set(config_toml()["sandbox_required_layers"]) == {"network", "landlock", "seccomp"}
    assert docker_env()["HELIX_RUNNER_SANDBOX"] == "required"
    assert set(docker_env()["HELIX_RUNNER_SANDBOX_REQUIRED_LAYERS"].split(",")) == {"network", "landlock", "seccomp"}
    # Unconfined AppArmor is outside baseline: enforce privileged, still warn about restricted.
    (namespace_patch,) = load("namespace-patch.yaml", SANDBOX)
    labels = namespace_patch["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert (
        labels["pod-security.kubernetes.io/warn"]
        == labels["pod-security.kubernetes.io/audit"]
        == "restricted"
    )


def test_the_sandbox_seccomp_profile_names_real_syscalls_and_allows_the_namespace_calls() -> None:
    import pyseccomp

    profile = json.loads(PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = [name for rule in profile["syscalls"] for name in rule["names"]]
    assert len(denied) == len(set(denied))
    assert [n for n in denied if pyseccomp.resolve_syscall(pyseccomp.Arch.X86_64, n) == -1] == []  # no typo
    assert not set(NAMESPACE_CALLS) & set(denied)
    assert {
        "bpf",
        "kexec_load",
        "keyctl",
        "perf_event_open",
        "setns",
        "userfaultfd",
        "io_uring_setup",
    } <= set(denied)


# Loads a seccomp profile (argv[1], plus the calls in argv[2:] denied) into this process, then finds
# the sandbox a phase would get here, as the server does at start (detection and a probe through the
# shim): prints each layer as JSON.
_UNDER_PROFILE = """
import json, sys, tempfile
from pathlib import Path
import pyseccomp
profile = json.loads(Path(sys.argv[1]).read_text())
f = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
for rule in profile["syscalls"]:
    for name in rule["names"]:
        if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) >= 0:
            f.add_rule(pyseccomp.ERRNO(rule.get("errnoRet", 1)), name)
for name in sys.argv[2:]:
    if name == "clone":  # with any namespace flag
        for flag in (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000):
            f.add_rule(pyseccomp.ERRNO(1), "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    else:
        f.add_rule(pyseccomp.ERRNO(1), name)
f.load()
from helix_runner.process.sandbox.phase_sandbox import Sandbox
sandbox = Sandbox.start("auto", data_dir=Path(tempfile.mkdtemp()), egress_ports=(9,))
print(json.dumps({x.name: [x.active, x.detail] for x in sandbox.report_layers()}))
"""


def _layers_under_profile(*also_denied: str) -> dict[str, list]:
    from helix_runner.process.sandbox.detect import detect

    if detect(frozenset({"landlock", "seccomp"})).bwrap is None:
        pytest.skip("no bubblewrap sandbox on this host to check the profile against")
    result = subprocess.run(
        [sys.executable, "-c", _UNDER_PROFILE, str(PROFILE), *also_denied],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_under_the_sandbox_profile_a_phase_gets_every_layer() -> None:
    layers = _layers_under_profile()
    assert {name: active for name, (active, _) in layers.items()} == dict.fromkeys(
        ("namespaces", "network", "landlock", "seccomp"), True
    ), layers


def test_without_the_namespace_calls_as_under_runtime_default_phases_run_landlock_only() -> None:
    # The base's case: the calls RuntimeDefault refuses are refused, and the server falls back to
    # Landlock (files, TCP, signals) and its seccomp filter, saying why bubblewrap is off.
    layers = _layers_under_profile(*NAMESPACE_CALLS)
    assert {name: active for name, (active, _) in layers.items()} == {
        "namespaces": False,
        "network": True,
        "landlock": True,
        "seccomp": True,
    }, layers
    assert "user namespaces" in layers["namespaces"][1] and "Landlock TCP" in layers["network"][1]

# syntax=docker/dockerfile:1
#
# Helix Runner image. Build from the repo root:  docker build -t helix-runner:0.1.0 .
# Kubernetes manifests for it live in deploy/k8s/.

# One tag for both stages: the venv built in the first stage is copied into the second and
# only works against the identical interpreter path and version. Pin a digest as well once the
# image is built somewhere that can resolve it.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
# README.md is deliberately not copied: it only feeds wheel metadata, and setuptools builds
# without it (with a warning).
COPY pyproject.toml ./
COPY server/ server/
# helix-runner ships the repository's Python client (the `helix-runner` client verbs use it) in its
# own wheel, from clients/python/src: never resolved from a package index.
COPY clients/python/ clients/python/

# The venv has no pip of its own (pip --python installs into it from outside), so the runtime
# stage gets the application and its dependencies and no packaging tools beyond the base image's.
RUN python -m venv --without-pip /opt/venv \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /dist . \
    && pip --python /opt/venv/bin/python install --no-cache-dir /dist/*.whl


FROM ${PYTHON_IMAGE}

# Each package earns its place:
#   tini            PID 1: forwards SIGTERM to the server and reaps the orphans that phases leave
#                   behind (children run in their own process groups; Python as PID 1 reaps nothing).
#   git             the Claude Code CLI and the agent's Bash tool work in git checkouts.
#   ca-certificates TLS for git and the CLI behind corporate proxies; the base image has it today,
#                   listed so the dependency does not silently disappear with a base change.
#   procps          ps/kill/pkill for the agent's Bash tool and for inspecting process groups
#                   with `kubectl exec` when a phase misbehaves.
#   bubblewrap      builds each phase's sandbox namespaces (README "Sandbox"; needs user namespaces,
#                   see deploy/k8s); libseccomp2 compiles the phase sandbox's seccomp filter.
# Versions are not pinned (DL3008 ignored in .hadolint.yaml): the pinned base tag fixes the
# Debian release, and bookworm-security drops superseded versions, which would break rebuilds.
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        bubblewrap \
        ca-certificates \
        git \
        libseccomp2 \
        procps \
        tini \
    && rm -rf /var/lib/apt/lists/*

# Fixed numeric IDs so the manifests can set runAsUser/fsGroup and the kubelet can verify
# runAsNonRoot. A real login shell because the agent's Bash tool runs as this user.
RUN groupadd --system --gid 10001 helix \
    && useradd --system --no-log-init --uid 10001 --gid helix \
        --home-dir /home/helix --create-home --shell /bin/bash helix \
    && install -d -o helix -g helix -m 0750 /var/lib/helix-runner /workspace

COPY --from=builder /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/helix \
    HELIX_RUNNER_HOST=0.0.0.0 \
    HELIX_RUNNER_DATA_DIR=/var/lib/helix-runner \
    HELIX_RUNNER_WORKSPACE_ROOTS=/workspace \
    HELIX_RUNNER_SANDBOX=required \
    HELIX_RUNNER_SANDBOX_REQUIRED_LAYERS=network,landlock,seccomp

# The phase sandbox fails closed: a container that cannot give a phase Landlock, seccomp and the
# network layer (Landlock's TCP rules where no user namespace is allowed) refuses phases, naming the
# layer. bubblewrap's namespaces are used where the runtime allows user namespaces (Docker's default
# seccomp profile does not; README "Sandbox", "Which layers each deployment has").

# Declared after the directories are created and chowned so anonymous volumes start out
# writable by the service user. Binding 0.0.0.0 means the server refuses to start without
# HELIX_RUNNER_AUTH_TOKEN_FILE: that is intended, an unauthenticated listener is never the default.
VOLUME ["/var/lib/helix-runner", "/workspace"]

USER 10001:10001

EXPOSE 50051

# No HEALTHCHECK: Kubernetes ignores it and probes the gRPC health service natively
# (deploy/k8s/base/statefulset.yaml), and the image has no gRPC health client to run one with.
ENTRYPOINT ["/usr/bin/tini", "--", "helix-runner"]
CMD ["serve"]

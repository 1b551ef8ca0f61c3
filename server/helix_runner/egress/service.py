"""The gateway and the egress proxy together, as the composition root starts them and a phase uses them.

``Egress`` owns the capability table both check, starts what the config turns on (each on
127.0.0.1, an ephemeral port unless configured), and tells a phase's CLI where they are: the
fixed part of its environment (``static_env``: the gateway's URL, ``NO_PROXY``) and the part that
carries its capability (``capability_env``: the key and the proxy URLs). ``ports`` are the two
host ports a sandboxed phase may reach.

With the proxy on, the server's CA (authority.py) is loaded or made in ``ca_dir`` and every phase
trusts it through the variables common tools read (``TRUST_ENV``): the bundle of the system's roots
and the CA, in ``trust_dir``, the one directory of the data dir a sandboxed phase may read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from helix_runner.egress.allowlist import EgressPolicy
from helix_runner.egress.authority import CertificateAuthority
from helix_runner.egress.capabilities import Capabilities
from helix_runner.egress.gateway import ApiGateway, GatewaySettings
from helix_runner.egress.interception import Interceptor
from helix_runner.egress.proxy import EgressProxy, ProxySettings
from helix_runner.egress.vault import Vault

log = logging.getLogger(__name__)

# The CLI's key variable (sent as x-api-key) and the proxy variables its tools read: curl, git, pip
# and npm read the lower-case ones, most others the upper-case ones.
API_KEY_ENV = "ANTHROPIC_API_KEY"
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
NO_PROXY_ENV = ("NO_PROXY", "no_proxy")
NO_PROXY = "127.0.0.1,localhost,::1"  # the gateway is reached directly; so is what the phase serves itself
# Where tools look for trusted roots: OpenSSL (Python's ssl, curl, wget), requests, pip, git, and
# the combined bundle for each; Node adds NODE_EXTRA_CA_CERTS (the CA alone) to its own roots.
BUNDLE_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE")
CA_ENV = ("NODE_EXTRA_CA_CERTS",)


@dataclass(frozen=True)
class EgressSettings:
    """What to start: the gateway (None: off), the proxy (None: off), and the server's egress policy."""

    gateway: GatewaySettings | None
    proxy: ProxySettings | None
    policy: EgressPolicy = EgressPolicy()
    # The server's CA for TLS termination (None: no termination; a host with rules is refused).
    ca_dir: Path | None = None
    upstream_ca_file: Path | None = None
    # The credential vault's key (None: no vault).
    vault: Vault | None = None


class Egress:
    """The server's gateway and egress proxy, and their capability table."""

    def __init__(self, settings: EgressSettings) -> None:
        self.settings = settings
        self.capabilities = Capabilities()
        self.policy = settings.policy
        self.gateway: ApiGateway | None = None
        self.proxy: EgressProxy | None = None
        self.authority: CertificateAuthority | None = None
        self.vault = settings.vault

    async def start(self) -> Egress:
        try:
            if self.settings.gateway is not None:
                self.gateway = await ApiGateway(self.settings.gateway, self.capabilities).start()
            if self.settings.proxy is not None:
                interceptor = None
                if self.settings.ca_dir is not None:
                    self.authority = await asyncio.to_thread(CertificateAuthority(self.settings.ca_dir).load_or_create)
                    interceptor = Interceptor(self.authority, self.settings.upstream_ca_file)
                self.proxy = await EgressProxy(self.settings.proxy, self.capabilities, interceptor=interceptor).start()
        except BaseException:
            await self.stop()
            raise
        self.own_ports(())
        log.info("egress", extra={"fields": {
            "gateway": self.gateway.base_url if self.gateway else "off",
            "upstream": str(self.settings.gateway.upstream) if self.settings.gateway else "",
            "proxy": f"127.0.0.1:{self.proxy.port}" if self.proxy else "off",
            "allowlist": [str(p) for p in self.policy.allowlist]}})
        return self

    async def stop(self) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
            self.proxy = None
        if self.gateway is not None:
            await self.gateway.stop()
            self.gateway = None

    @property
    def ports(self) -> tuple[int, ...]:
        """The host ports a phase may connect to: the gateway's and the proxy's."""
        return tuple(s.port for s in (self.gateway, self.proxy) if s is not None)

    def own_ports(self, server_ports: Iterable[int]) -> None:
        """The server's ports (gRPC, dashboard, metrics, health): the proxy never connects to them,
        nor to its own or the gateway's."""
        ports = frozenset(p for p in (*server_ports, *self.ports) if p)
        self.policy = replace(self.policy, own_ports=ports | self.policy.own_ports)

    def static_env(self) -> dict[str, str]:
        """The CLI's environment that is the same for every phase (no capability in it)."""
        env: dict[str, str] = {}
        if self.gateway is not None:
            env["ANTHROPIC_BASE_URL"] = self.gateway.base_url
            # The CLI's telemetry, error reports and update checks would only meet the proxy's refusal.
            env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
        if self.proxy is not None:
            env.update(dict.fromkeys(NO_PROXY_ENV, NO_PROXY))
        if self.proxy is not None and self.authority is not None:
            env.update(dict.fromkeys(BUNDLE_ENV, str(self.authority.bundle_file)))
            env.update(dict.fromkeys(CA_ENV, str(self.authority.ca_file)))
        return env

    @property
    def trust_dir(self) -> Path | None:
        """The directory of the CA and the bundle phases read (None: no TLS termination)."""
        return self.authority.trust_dir if self.proxy is not None and self.authority is not None else None

    def capability_env(self, capability: str) -> dict[str, str]:
        """The variables that carry a phase's capability."""
        env: dict[str, str] = {}
        if self.gateway is not None:
            env[API_KEY_ENV] = capability
        if self.proxy is not None:
            env.update(dict.fromkeys(PROXY_ENV, f"http://phase:{capability}@127.0.0.1:{self.proxy.port}"))
        return env

    def capability_in(self, env: Mapping[str, str]) -> str | None:
        """The capability a process's environment (``capability_env``) carries, if any."""
        if API_KEY_ENV in env and self.gateway is not None:
            return env[API_KEY_ENV]
        url = env.get(PROXY_ENV[0], "")
        if self.proxy is not None and "@" in url:
            return url.split("://", 1)[-1].split("@", 1)[0].partition(":")[2] or None
        return None

    @property
    def withheld_env(self) -> tuple[str, ...]:
        """Server variables a phase must not inherit while these are on (its own come from here)."""
        names: list[str] = []
        if self.gateway is not None:
            names += ["ANTHROPIC_*"]
        if self.proxy is not None:
            names += [*PROXY_ENV, *NO_PROXY_ENV, "ALL_PROXY", "all_proxy"]
        if self.trust_dir is not None:
            names += [*BUNDLE_ENV, *CA_ENV]
        return tuple(names)

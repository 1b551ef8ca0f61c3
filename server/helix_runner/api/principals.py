"""Who is calling: a call's credentials mapped to a ``Principal`` (docs/tenancy.md).

Three kinds of credential, each optional:

* the single token of older setups (``auth_token_file``): the ``admin`` principal, everywhere;
* a principals file (``auth_principals_file``, TOML): named static tokens kept as their SHA-256
  digests, client-certificate subjects, each with its grants, and a ``[jwt]`` table;
* bearer JWTs (RFC 9068 style) checked with PyJWT against a JWKS from a file (re-read when it
  changes) or a URL (``PyJWKClient``: keys cached, fetched again for an unknown ``kid``, which is how
  a rotation arrives). Issuer, audience, expiry and not-before are checked with ``leeway_seconds``;
  only the asymmetric algorithms the file lists are accepted, so ``alg: none`` or an HS256 token
  signed with a public key is refused.

A token's principal is cached by the header's digest (a JWT until it expires), so the check a call
pays is one SHA-256 and a dict lookup (benchmarks/bench_authorization.py).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
import tomllib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import orjson

from helix_runner.config import TOKEN_DIGEST_PREFIX
from helix_runner.domain.access import ADMIN, Principal, Role, parse_grants

log = logging.getLogger(__name__)

_BEARER = "Bearer "
# Asymmetric only: a symmetric algorithm would let a token "signed" with a public key pass.
ALLOWED_JWT_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                                    "EdDSA"})
_CACHE_ENTRIES = 4096


class PrincipalsFileError(ValueError):
    """The principals file cannot be used (the message names the file and the entry)."""


@dataclass(frozen=True)
class JwtRules:
    """How bearer JWTs are checked and read (the principals file's ``[jwt]`` table)."""

    jwks: str  # a file path or an https:// (or, for tests on loopback, http://) URL
    issuer: str
    audience: str
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    leeway_seconds: float = 30.0
    name_claim: str = "sub"
    grants_claim: str = "helix_grants"  # {project: [roles]}


@dataclass(frozen=True)
class PrincipalsFile:
    """What the principals file declares: token digests, certificate subjects and JWT rules."""

    tokens: Mapping[str, Principal] = field(default_factory=dict)  # hex sha256 of the token -> principal
    certificates: Mapping[str, Principal] = field(default_factory=dict)  # subject -> principal
    jwt: JwtRules | None = None


def load_principals_file(path: Path) -> PrincipalsFile:
    """Reads and checks the principals file (PrincipalsFileError saying what is wrong where)."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PrincipalsFileError(f"cannot read auth_principals_file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PrincipalsFileError(f"auth_principals_file {path} is not valid TOML: {exc}") from None
    unknown = set(raw) - {"token", "certificate", "jwt"}
    if unknown:
        raise PrincipalsFileError(f"auth_principals_file {path}: unknown table(s) {', '.join(sorted(unknown))} "
                                  "(token, certificate, jwt)")
    try:
        tokens: dict[str, Principal] = {}
        for i, entry in enumerate(raw.get("token", [])):
            where = f"{path} [[token]] #{i + 1}"
            name = _name(entry, where)
            digest = str(entry.get("sha256", "")).lower().removeprefix(TOKEN_DIGEST_PREFIX)
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"{where} ({name}): sha256 must be the token's SHA-256 digest, 64 hex digits "
                                 "(`printf %s TOKEN | sha256sum`); the token itself is never stored")
            if digest in tokens:
                raise ValueError(f"{where} ({name}): the same token digest as {tokens[digest].name}")
            tokens[digest] = Principal(name, parse_grants(entry.get("grants", {}), where), "token")
        certificates: dict[str, Principal] = {}
        for i, entry in enumerate(raw.get("certificate", [])):
            where = f"{path} [[certificate]] #{i + 1}"
            subject = str(entry.get("subject", "")).strip()
            if not subject:
                raise ValueError(f"{where}: subject is required (the client certificate's subject, e.g. CN=ci,O=team-a)")
            certificates[subject] = Principal(str(entry.get("name") or subject),
                                              parse_grants(entry.get("grants", {}), where), "certificate")
        rules = _jwt_rules(raw["jwt"], f"{path} [jwt]") if "jwt" in raw else None
    except ValueError as exc:
        raise PrincipalsFileError(str(exc)) from None
    return PrincipalsFile(tokens, certificates, rules)


def _name(entry: Mapping[str, Any], where: str) -> str:
    name = str(entry.get("name", "")).strip()
    if not name or len(name) > 200:
        raise ValueError(f"{where}: name is required (1-200 characters): it is who the audit trail names")
    return name


def _jwt_rules(raw: Mapping[str, Any], where: str) -> JwtRules:
    for key in ("jwks", "issuer", "audience"):
        if not str(raw.get(key, "")).strip():
            raise ValueError(f"{where}: {key} is required")
    algorithms = tuple(raw.get("algorithms", ("RS256", "ES256")))
    bad = [a for a in algorithms if a not in ALLOWED_JWT_ALGORITHMS]
    if bad or not algorithms:
        raise ValueError(f"{where}: algorithms {bad or '[]'} not allowed; asymmetric ones only: "
                         f"{', '.join(sorted(ALLOWED_JWT_ALGORITHMS))}")
    return JwtRules(str(raw["jwks"]), str(raw["issuer"]), str(raw["audience"]), algorithms,
                    float(raw.get("leeway_seconds", 30)), str(raw.get("name_claim", "sub")),
                    str(raw.get("grants_claim", "helix_grants")))


class JwksFile:
    """A JWKS kept in a file: re-read when its modification time or size changes (a rotation)."""

    def __init__(self, path: Path):
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._lock = threading.Lock()

    def key(self, kid: str | None) -> jwt.PyJWK:
        with self._lock:
            st = self.path.stat()
            if (st.st_mtime_ns, st.st_size) != self._stamp:
                keys = jwt.PyJWKSet.from_json(self.path.read_text(encoding="utf-8")).keys
                self._keys = {k.key_id or "": k for k in keys}
                self._stamp = (st.st_mtime_ns, st.st_size)
            if kid is None and len(self._keys) == 1:
                return next(iter(self._keys.values()))
            found = self._keys.get(kid or "")
            if found is None:
                raise jwt.InvalidTokenError(f"no key {kid!r} in the JWKS")
            return found


class JwtVerifier:
    """Checks a bearer JWT and maps its claims to a principal (None: not valid)."""

    def __init__(self, rules: JwtRules):
        self.rules = rules
        if rules.jwks.startswith(("https://", "http://")):
            client = jwt.PyJWKClient(rules.jwks, cache_keys=True, lifespan=300, timeout=5)
            self._key = lambda kid, token: client.get_signing_key_from_jwt(token)
        else:
            keys = JwksFile(Path(rules.jwks))
            self._key = lambda kid, token: keys.key(kid)

    def verify(self, token: str) -> tuple[Principal, float] | None:
        """The principal and the token's expiry (epoch seconds), or None with the reason logged."""
        rules = self.rules
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in rules.algorithms:
                raise jwt.InvalidAlgorithmError(f"algorithm {header.get('alg')!r} is not accepted")
            key = self._key(header.get("kid"), token)
            claims = jwt.decode(token, key=key, algorithms=list(rules.algorithms), audience=rules.audience,
                                issuer=rules.issuer, leeway=rules.leeway_seconds,
                                options={"require": ["exp", "iss", "aud", rules.name_claim]})
            name = str(claims[rules.name_claim])
            grants = parse_grants(claims.get(rules.grants_claim, {}), f"the token's {rules.grants_claim} claim")
        except (jwt.PyJWTError, ValueError, OSError) as exc:
            log.info("bearer JWT refused", extra={"fields": {"why": type(exc).__name__, "detail": str(exc)[:200]}})
            return None
        return Principal(name, grants, "jwt"), float(claims["exp"]) + rules.leeway_seconds


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    """Maps a call's ``authorization`` header and client certificate to a principal.

    ``legacy_token`` is the token (or ``sha256:`` digest) of ``auth_token_file``: it is ``admin``.
    ``mutual_tls`` without a principals file entry for the subject keeps today's meaning: any
    certificate the client CA signed is ``admin``. With nothing configured (a loopback server
    without a token) every caller is ``admin``.
    """

    def __init__(self, legacy_token: str | None, principals: PrincipalsFile | None = None,
                 mutual_tls: bool = False):
        self.legacy_token = legacy_token
        self._legacy_digest = (legacy_token[len(TOKEN_DIGEST_PREFIX):] if legacy_token is not None
                               and legacy_token.startswith(TOKEN_DIGEST_PREFIX) else
                               token_digest(legacy_token) if legacy_token is not None else None)
        self.principals = principals or PrincipalsFile()
        self.mutual_tls = mutual_tls
        self._jwt = JwtVerifier(self.principals.jwt) if self.principals.jwt is not None else None
        self._cache: OrderedDict[str, tuple[Principal, float]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        """Whether calls need no credential at all (nothing configured: a loopback-only server)."""
        return (self.legacy_token is None and not self.principals.tokens and self._jwt is None
                and not self.mutual_tls)

    @property
    def certificate_may_suffice(self) -> bool:
        """Whether a call without a bearer token may still name a principal by its certificate."""
        return self.mutual_tls and (bool(self.principals.certificates) or self.legacy_token is None)

    def from_header(self, authorization: str | bytes) -> Principal | None:
        """The principal of ``Bearer <token>``; None when the header names nobody."""
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")
        if not authorization.startswith(_BEARER):
            return None
        token = authorization[len(_BEARER):].strip()
        if not token:
            return None
        digest = token_digest(token)
        now = time.time()
        with self._lock:
            hit = self._cache.get(digest)
            if hit is not None and hit[1] > now:
                self._cache.move_to_end(digest)
                return hit[0]
        found = self._resolve(token, digest)
        if found is None:
            return None
        with self._lock:
            self._cache[digest] = found
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return found[0]

    def _resolve(self, token: str, digest: str) -> tuple[Principal, float] | None:
        if self._legacy_digest is not None and hmac.compare_digest(digest, self._legacy_digest):
            return ADMIN, float("inf")
        named = self.principals.tokens.get(digest)
        if named is not None:
            return named, float("inf")
        if self._jwt is not None and token.count(".") == 2:
            return self._jwt.verify(token)
        return None

    def from_certificate(self, subject: str) -> Principal | None:
        """The principal of a verified client certificate's subject (RFC 4514 string)."""
        if not self.mutual_tls or not subject:
            return None
        named = self.principals.certificates.get(subject)
        if named is not None:
            return named
        if self.principals.certificates or self.legacy_token is not None:
            return None  # subjects are named, or (as before) a token is needed besides the certificate
        # Older setups: the client CA alone decides, so every certificate it signed is admin.
        return ADMIN

    def from_metadata(self, metadata: Any, certificate_subject: str = "") -> Principal | None:
        """The principal of a call; None: refuse it (UNAUTHENTICATED)."""
        header = next((v for k, v in metadata or () if k == "authorization"), None)
        if header:
            return self.from_header(header)
        if self.open:
            return ADMIN
        return self.from_certificate(certificate_subject)


def principal_header(principal: Principal) -> str:
    """The ``x-helix-principal`` value a replica forwards with a call, so the owner checks the caller."""
    return orjson.dumps({"name": principal.name, "source": principal.source, "grants": principal.describe()}).decode()


def principal_from_header(value: str) -> Principal | None:
    """The principal a forwarded call carries (None when the value is not one)."""
    try:
        raw = orjson.loads(value)
        return Principal(str(raw["name"]), parse_grants(raw.get("grants", {}), "x-helix-principal"),
                         str(raw.get("source", "token")))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def may_carry(principal: Principal) -> bool:
    """Whether a forwarded call authenticated as ``principal`` may name the caller it acts for: only
    an admin everywhere (the replicas' shared token, or a certificate of older setups) can."""
    return principal.everywhere(Role.ADMIN)

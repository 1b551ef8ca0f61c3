"""Credentials to principals: the old single token, named tokens by digest, certificates, and JWTs
checked against a JWKS this test makes itself (expired, wrong audience, rotated key, forged alg)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from helix_runner.api.principals import Authenticator, PrincipalsFileError, load_principals_file
from helix_runner.domain.access import ADMIN, Role

ISSUER, AUDIENCE = "https://id.example.test", "helix-runner"


class Keys:
    """RSA signing keys with ids, and the JWKS file that publishes some of them."""

    def __init__(self, path):
        self.path = path
        self.private: dict[str, rsa.RSAPrivateKey] = {}

    def make(self, kid: str) -> None:
        self.private[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def publish(self, *kids: str) -> None:
        keys = []
        for kid in kids:
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private[kid].public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        self.path.write_text(json.dumps({"keys": keys}))
        stat = self.path.stat()  # a rotation within the same second still changes the stamp
        os.utime(self.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    def token(self, kid: str, **claims) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice@team-a", "iat": now, "exp": now + 300,
                "helix_grants": {"team-a": ["operator", "approver"]}, **claims}
        return jwt.encode(body, self.private[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def keys(tmp_path):
    k = Keys(tmp_path / "jwks.json")
    k.make("k1")
    k.publish("k1")
    return k


def principals_file(tmp_path, body: str):
    path = tmp_path / "principals.toml"
    path.write_text(body)
    return load_principals_file(path)


def jwt_authenticator(tmp_path, keys, extra: str = "") -> Authenticator:
    return Authenticator(None, principals_file(tmp_path, f"""
[jwt]
jwks = "{keys.path}"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"
leeway_seconds = 5
{extra}
"""))


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_valid_jwt_names_its_subject_with_the_grants_of_its_claim(tmp_path, keys):
    auth = jwt_authenticator(tmp_path, keys)
    alice = auth.from_header(bearer(keys.token("k1")))
    assert alice is not None and (alice.name, alice.source) == ("alice@team-a", "jwt")
    assert alice.may(Role.APPROVER, "team-a") and not alice.may(Role.VIEWER, "team-b")


@pytest.mark.parametrize("claims", [
    {"exp": int(time.time()) - 60},  # expired beyond the leeway
    {"aud": "another-service"},
    {"iss": "https://evil.example.test"},
    {"nbf": int(time.time()) + 600},  # not yet valid
])
def test_a_jwt_with_a_wrong_claim_names_nobody(tmp_path, keys, claims):
    assert jwt_authenticator(tmp_path, keys).from_header(bearer(keys.token("k1", **claims))) is None


def test_a_rotated_key_is_picked_up_and_a_retired_one_refused(tmp_path, keys):
    auth = jwt_authenticator(tmp_path, keys)
    keys.make("k2")
    assert auth.from_header(bearer(keys.token("k2"))) is None  # not published yet
    keys.publish("k1", "k2")
    assert auth.from_header(bearer(keys.token("k2", sub="bob"))).name == "bob"
    keys.publish("k2")  # k1 retired
    assert auth.from_header(bearer(keys.token("k1", sub="carol"))) is None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_forged_algorithms_are_refused(tmp_path, keys):
    auth = jwt_authenticator(tmp_path, keys)
    claims = jwt.decode(keys.token("k1"), options={"verify_signature": False})
    claims["helix_grants"] = {"*": ["admin"]}
    # alg none: no signature at all.
    unsigned = f"{_b64(json.dumps({'alg': 'none', 'kid': 'k1'}).encode())}.{_b64(json.dumps(claims).encode())}."
    assert auth.from_header(bearer(unsigned)) is None
    # HS256 "signed" with the public key, the classic confusion: a verifier that takes the key for
    # an HMAC secret would accept it.
    public_pem = keys.private["k1"].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = _b64(json.dumps(claims).encode())
    import hmac
    signature = _b64(hmac.new(public_pem, f"{header}.{body}".encode(), hashlib.sha256).digest())
    assert auth.from_header(bearer(f"{header}.{body}.{signature}")) is None
    # ES256 from a key the JWKS does not hold, under the published kid.
    other = ec.generate_private_key(ec.SECP256R1())
    assert auth.from_header(bearer(jwt.encode(claims, other, algorithm="ES256", headers={"kid": "k1"}))) is None


def test_named_tokens_are_known_by_their_digest_and_the_old_token_is_admin(tmp_path):
    digest = hashlib.sha256(b"team-a-ci-token-0123456789").hexdigest()
    principals = principals_file(tmp_path, f"""
[[token]]
name = "ci@team-a"
sha256 = "{digest}"
grants = {{ team-a = ["operator"] }}
""")
    auth = Authenticator("the-old-single-token-0123", principals)
    ci = auth.from_header("Bearer team-a-ci-token-0123456789")
    assert ci.name == "ci@team-a" and ci.may(Role.OPERATOR, "team-a") and not ci.may(Role.APPROVER, "team-a")
    assert auth.from_header("Bearer the-old-single-token-0123") is ADMIN
    assert auth.from_header(f"Bearer {digest}") is None  # the digest is not the token
    assert auth.from_header("Bearer wrong") is None and auth.from_header("Basic eDp5") is None
    assert auth.from_metadata(()) is None  # no credential, and the server has some


def test_a_certificate_subject_is_a_principal(tmp_path):
    principals = principals_file(tmp_path, """
[[certificate]]
subject = "CN=deployer,O=team-b"
name = "deployer@team-b"
grants = { team-b = ["operator"] }
""")
    auth = Authenticator(None, principals, mutual_tls=True)
    assert auth.from_metadata((), "CN=deployer,O=team-b").name == "deployer@team-b"
    assert auth.from_metadata((), "CN=someone-else") is None  # subjects are named: others are nobody
    assert Authenticator(None, None, mutual_tls=True).from_metadata((), "CN=any") is ADMIN  # older setups


@pytest.mark.parametrize(("body", "message"), [
    ('[[token]]\nname = "x"\nsha256 = "abc"\n', "64 hex digits"),
    ('[[token]]\nsha256 = "' + "a" * 64 + '"\n', "name is required"),
    ('[jwt]\njwks = "k.json"\nissuer = "i"\naudience = "a"\nalgorithms = ["HS256"]\n', "asymmetric ones only"),
    ('[jwt]\njwks = "k.json"\nissuer = "i"\n', "audience is required"),
    ('[tokens]\n', "unknown table"),
    ('[[token]]\nname = "x"\nsha256 = "' + "a" * 64 + '"\ngrants = { p = ["root"] }\n', "unknown role 'root'"),
])
def test_a_bad_principals_file_stops_the_start_saying_what_is_wrong(tmp_path, body, message):
    with pytest.raises(PrincipalsFileError, match=message):
        principals_file(tmp_path, body)

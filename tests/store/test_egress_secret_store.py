"""The credential vault's rows in both stores: put replaces by name, a project sees only its own,
the per-project cap holds, and another replica reads what one wrote."""

from __future__ import annotations

from helix_runner.store.protocol import EgressSecretRow


def _row(project: str, name: str, ciphertext: bytes = b"sealed", hosts=("git.example.com:443",)) -> EgressSecretRow:
    return EgressSecretRow(project, name, tuple(hosts), "basic", "", "x-access-token", "kid", b"n" * 12, ciphertext, 7)


def test_secrets_are_put_listed_per_project_replaced_and_deleted(store, opener) -> None:
    assert store.put_egress_secret(_row("a", "GIT_TOKEN"), 8)
    assert store.put_egress_secret(_row("a", "API_KEY", hosts=("api.example.com:443", "[::1]:8443")), 8)
    assert store.put_egress_secret(_row("b", "GIT_TOKEN", b"b's"), 8)
    assert [r.name for r in store.list_egress_secrets("a")] == ["API_KEY", "GIT_TOKEN"]
    assert store.list_egress_secrets("a")[0].hosts == ("api.example.com:443", "[::1]:8443")
    assert store.put_egress_secret(_row("a", "GIT_TOKEN", b"rotated"), 8)  # the same name replaces
    other = opener()  # another replica (or a restarted server) reads the same rows
    rows = {r.name: r for r in other.list_egress_secrets("a")}
    assert rows["GIT_TOKEN"].ciphertext == b"rotated" and rows["GIT_TOKEN"].nonce == b"n" * 12
    assert [r.ciphertext for r in other.list_egress_secrets("b")] == [b"b's"]
    assert store.delete_egress_secret("a", "GIT_TOKEN") and not store.delete_egress_secret("a", "GIT_TOKEN")
    assert [r.name for r in store.list_egress_secrets("a")] == ["API_KEY"]
    assert [r.name for r in store.list_egress_secrets("b")] == ["GIT_TOKEN"]


def test_the_per_project_cap_refuses_a_new_name_but_not_a_replacement(store) -> None:
    assert store.put_egress_secret(_row("a", "ONE"), 2) and store.put_egress_secret(_row("a", "TWO"), 2)
    assert not store.put_egress_secret(_row("a", "THREE"), 2)
    assert store.put_egress_secret(_row("a", "TWO", b"new"), 2)
    assert store.put_egress_secret(_row("b", "THREE"), 2)  # another project's count is its own
    assert [r.name for r in store.list_egress_secrets("a")] == ["ONE", "TWO"]

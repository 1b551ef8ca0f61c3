"""``whoami`` and ``audit`` against the real server with a principals file; ``--token-command``."""

from __future__ import annotations

import hashlib
import json
import sys

from support.cli_verbs import helix

ADMIN_TOKEN = "the-old-single-token-0123456789"
CAROL = "carol-operates-team-c-0123456789"


async def test_whoami_and_audit_with_a_token_from_a_command(runner_factory, tmp_path, monkeypatch):
    principals = tmp_path / "principals.toml"
    principals.write_text("\n".join([
        "[[token]]", 'name = "carol@team-c"', f'sha256 = "{hashlib.sha256(CAROL.encode()).hexdigest()}"',
        'grants = { team-c = ["operator"] }', ""]))
    token_file = tmp_path / "token"
    token_file.write_text(ADMIN_TOKEN)
    printer = f"{sys.executable} -c \"print('{CAROL}')\""
    async with runner_factory(None, auth_principals_file=str(principals), auth_token_file=str(token_file)) as runner:
        address = f"127.0.0.1:{runner.server.port}"
        me = await helix(address, "whoami", "--token-command", printer)
        assert me.code == 0, me.err
        assert me.lines[0] == "carol@team-c (token)" and "team-c: operator, viewer" in me.out
        refused = await helix(address, "cancel", "job-x", "p", "--token-command", printer)
        assert refused.code == 4, refused.err  # no such job, and carol may not see one anyway
        not_allowed = await helix(address, "audit", "--token-command", printer)
        assert not_allowed.code == 4 and "needs the admin role on every project" in not_allowed.err
        broken = await helix(address, "whoami", "--token-command", f"{sys.executable} -c 'raise SystemExit(3)'")
        assert broken.code == 2 and "the token command exited 3" in broken.err
        monkeypatch.setenv("HELIX_RUNNER_TOKEN", ADMIN_TOKEN)
        quota = await helix(address, "quota", "--project", "team-c", "--day", "2.5")
        assert quota.code == 0 and "today:      $0.0000 of $2.5000" in quota.out and "no cap" in quota.out
        assert "set by admin" in quota.out
        log = await helix(address, "audit", "--json")
        assert log.code == 0, log.err
        entries = json.loads(log.out)
    assert [(e["principal"], e["action"], e["outcome"]) for e in entries] == [
        ("admin", "SetProjectQuota", "OK"), ("carol@team-c", "CancelPhase", "NOT_FOUND PHASE_NOT_FOUND")]

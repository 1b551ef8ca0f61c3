"""The CLI's argv: the caller's and the server's --settings merged, and secrets redacted for the record."""

from __future__ import annotations

import json

from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.process.claude_command import build_argv, redact_argv

SERVER_SETTINGS = json.dumps({"apiKeyHelper": "/srv/helper --token abc"})


def spec(**options) -> PhaseSpec:
    return PhaseSpec.create(job_id="j", phase_id="p", project_id="", prompt="hi", working_dir="/w", **options)


def settings_of(argv: list[str]) -> dict:
    values = [a.split("=", 1)[1] for a in argv if a.startswith("--settings=")]
    assert len(values) == 1, argv  # one --settings, never two competing ones
    return json.loads(values[0])


def test_the_server_s_api_key_helper_wins_over_the_caller_s_settings():
    argv = build_argv(
        "claude",
        spec(settings=json.dumps({"apiKeyHelper": "echo stolen", "model": "x"})),
        settings=SERVER_SETTINGS,
    )
    assert settings_of(argv) == {"apiKeyHelper": "/srv/helper --token abc", "model": "x"}


def test_settings_are_passed_as_given_without_a_key_helper_and_the_server_s_alone_without_caller_settings():
    assert settings_of(build_argv("claude", spec(settings='{"a": 1}'))) == {"a": 1}
    assert settings_of(build_argv("claude", spec(), settings=SERVER_SETTINGS)) == json.loads(SERVER_SETTINGS)
    assert not any(a.startswith("--settings") for a in build_argv("claude", spec()))


def test_redaction_keeps_names_and_drops_every_value():
    mcp = {
        "mcpServers": {"db": {"command": "x", "env": {"PW": "s3cret"}}, "web": {"url": "https://t/?k=s3cret"}}
    }
    argv = build_argv(
        "claude",
        spec(
            mcp_config=json.dumps(mcp),
            agents='{"rev": {"description": "d", "prompt": "s3cret"}}',
            settings='{"env": {"T": "s3cret"}}',
        ),
        settings=SERVER_SETTINGS,
    )
    record = redact_argv(argv)
    assert "s3cret" not in " ".join(record) and "abc" not in " ".join(record)
    assert '--mcp-config={"mcpServers":{"db":"***","web":"***"}}' in record
    assert '--agents={"rev":"***"}' in record
    assert '--settings={"env":"***","apiKeyHelper":"***"}' in record
    assert record[0] == "claude" and "--verbose" in record  # everything else untouched


def test_redaction_covers_the_two_argument_form_and_non_json_values():
    record = redact_argv(
        ["claude", "--settings", '{"k": "v"}', "--mcp-config", "/path/with secret.json", "-p"]
    )
    assert record == ("claude", "--settings", '{"k":"***"}', "--mcp-config", "<redacted 22 bytes>", "-p")


def test_bare_adds_an_ask_rule_for_every_tool_over_the_caller_s_permissions():
    argv = build_argv("claude", spec(bare=True, permission_mode="bypassPermissions",
                                     settings='{"permissions": {"deny": ["Bash(rm:*)"]}, "model": "x"}'),
                      settings=SERVER_SETTINGS)
    assert "--bare" in argv
    assert settings_of(argv) == {"permissions": {"deny": ["Bash(rm:*)"], "ask": ["*"]}, "model": "x",
                                 "apiKeyHelper": "/srv/helper --token abc"}
    assert settings_of(build_argv("claude", spec(bare=True, permission_mode="bypassPermissions"))) == {
        "permissions": {"ask": ["*"]}}


def test_a_hook_answer_becomes_a_permission_answer():
    from helix_runner.process.control_protocol import allow_hook, deny_hook, edit_hook, permission_answer

    assert permission_answer(allow_hook(), {"a": 1}) == {"behavior": "allow", "updatedInput": {"a": 1}}
    assert permission_answer(edit_hook({"a": 2}), {"a": 1}) == {"behavior": "allow", "updatedInput": {"a": 2}}
    assert permission_answer(deny_hook("no"), {"a": 1}) == {"behavior": "deny", "message": "no"}

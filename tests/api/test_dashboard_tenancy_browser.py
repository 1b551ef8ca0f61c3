"""The dashboard signs in with a token, shows who is signed in and only what that principal may
see, keeps the audit trail for admins, and signs out (real Chromium; issue 32 item 5)."""

from __future__ import annotations

import hashlib

import pytest
from playwright.async_api import async_playwright

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

ADMIN_TOKEN = "the-old-single-token-0123456789"
VIEWER = "viewer-of-team-a-0123456789"
WAIT_MS = 30_000


async def test_sign_in_see_your_projects_only_and_sign_out(claude_binary, scripted_api, runner_factory, chromium,
                                                           tmp_path):
    principals = tmp_path / "principals.toml"
    principals.write_text("\n".join([
        "[[token]]", 'name = "viewer@team-a"', f'sha256 = "{hashlib.sha256(VIEWER.encode()).hexdigest()}"',
        'grants = { team-a = ["viewer"] }', ""]))
    token = tmp_path / "token"
    token.write_text(ADMIN_TOKEN)
    api = scripted_api([Reply.text("Done.")] * 2)
    async with runner_factory(api, web_port=0, auth_principals_file=str(principals),
                              auth_token_file=str(token)) as runner:
        for job, project in (("job-a", "team-a"), ("job-b", "team-b")):
            async for _ in runner.stub.RunPhase(pb.RunPhaseRequest(
                    job_id=job, phase_id="p", project_id=project, prompt="hi", working_dir=str(runner.workdir)),
                    metadata=(("authorization", f"Bearer {ADMIN_TOKEN}"),), timeout=60):
                pass
        errors: list[str] = []
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium)
            try:
                page = await browser.new_page(viewport={"width": 1360, "height": 800})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(runner.server.web.url)
                # Not signed in: the server refuses, the page asks for a token.
                prompt = page.locator("[data-testid=whoami] .token input")
                await prompt.wait_for(timeout=WAIT_MS)
                await prompt.fill(VIEWER)
                await prompt.press("Enter")
                await page.locator("[data-testid=whoami]", has_text="viewer@team-a").wait_for(timeout=WAIT_MS)
                await page.locator("tr[data-job='job-a']").wait_for(timeout=WAIT_MS)
                assert await page.locator("tr[data-job='job-b']").count() == 0  # another team's job
                # The audit trail is for admins.
                await page.goto(runner.server.web.url + "#/audit")
                problem = page.locator("[data-testid=problem]")
                await problem.wait_for(timeout=WAIT_MS)
                assert "PERMISSION_DENIED" in await problem.inner_text()
                await page.locator("[data-testid=whoami] button", has_text="Sign out").click()
                await page.locator("[data-testid=whoami] button", has_text="Sign in").wait_for(timeout=WAIT_MS)
                # The admin sees the trail: both runs, by admin.
                await page.locator("[data-testid=whoami] button", has_text="Sign in").click()
                await prompt.fill(ADMIN_TOKEN)
                await prompt.press("Enter")
                await page.goto(runner.server.web.url + "#/audit")
                table = page.locator("[data-testid=audit]")
                await table.wait_for(timeout=WAIT_MS)
                text = await table.inner_text()
            finally:
                await browser.close()
    assert "RunPhase" in text and "team-b" in text and "admin" in text
    assert errors == []

"""The dashboard's Webhooks page in headless Chromium: subscriptions and the delivery log with attempts.

A real CLI phase held at a breakpoint is told to a receiver that first answers 503, then 200: the
page shows the subscription, the delivery DELIVERED after two tries, and, opened, each try's
status code and latency. The screenshot lands in test-artifacts/dashboard/webhooks.png.
"""

from __future__ import annotations

import pytest
from playwright.async_api import async_playwright
from support.browser import artifacts_dir
from support.streams import breakpoint_hit, start_phase
from support.webhook_receiver import Response, WebhookReceiver

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply
from helix_runner.webhook_http.signing import new_secret

pytestmark = pytest.mark.real_cli
WAIT_MS = 30_000


async def test_the_webhooks_page_shows_subscriptions_deliveries_and_their_attempts(
        claude_binary, scripted_api, runner_factory, chromium):
    receiver = WebhookReceiver(new_secret()).start()
    receiver.respond(Response(status=503))
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo hi"}), Reply.text("Done.")])
    try:
        async with runner_factory(api, web_port=0, webhook_private_allow=[receiver.allow],
                                  webhook_initial_backoff_seconds=0.2) as runner:
            made = await runner.stub.CreateWebhook(pb.CreateWebhookRequest(
                url=receiver.url, events=[res.WEBHOOK_EVENT_TYPE_PHASE_AWAITING_APPROVAL], secret=receiver.secret,
                description="on call"), timeout=10)
            call = start_phase(runner, "job-web", allowed_tools=["Bash"],
                               breakpoints=[res.Breakpoint(tool_name="Bash", once=True)])
            await call.wait_for(breakpoint_hit)
            await receiver.arrived(2)  # 503, then 200
            errors: list[str] = []
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium)
                page = await browser.new_page(viewport={"width": 1360, "height": 800})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(runner.server.web.url + "#/webhooks")
                hook = page.locator("[data-testid=webhook-row]", has_text=made.webhook.webhook_id)
                await hook.wait_for(timeout=WAIT_MS)
                assert "phase.awaiting_approval" in await hook.inner_text()
                assert "whsec_" not in await page.content()
                delivery = page.locator("[data-testid=delivery-row]", has_text="DELIVERED")
                await delivery.wait_for(timeout=WAIT_MS)
                text = await delivery.inner_text()
                assert "job-web/p" in text and "phase.awaiting_approval" in text and "200" in text
                await delivery.locator("td").first.click()
                attempts = page.locator("[data-testid=attempt-row]")
                await attempts.nth(1).wait_for(timeout=WAIT_MS)
                assert "503" in await attempts.nth(0).inner_text() and "200" in await attempts.nth(1).inner_text()
                await page.screenshot(path=artifacts_dir("dashboard") / "webhooks.png", full_page=True)
                await browser.close()
            assert errors == []
            await runner.stub.CancelPhase(pb.CancelPhaseRequest(**call.ids()), timeout=30)
    finally:
        receiver.stop()

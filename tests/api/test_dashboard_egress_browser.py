"""The dashboard shows a network request a breakpoint holds and decides it (real Chromium, real CLI;
issue 31 item 2: "from the web page")."""

from __future__ import annotations

import pytest
from playwright.async_api import async_playwright
from support.http_service import loopback_service
from support.streams import Stream

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli
WAIT_MS = 30_000


async def test_the_page_denies_a_held_request_with_a_reason_the_tool_reads(claude_binary, scripted_api,
                                                                           runner_factory, chromium):
    errors: list[str] = []
    with loopback_service(b"ok") as address:
        api = scripted_api([Reply.tool_use("Bash", {"command": f"curl -s -m 60 http://{address}/deploy"}),
                            Reply.text("Done.")])
        async with runner_factory(api, web_port=0, egress_private_allow=[address]) as runner:
            request = pb.RunPhaseRequest(job_id="job-web", phase_id="p", prompt="go", working_dir=str(runner.workdir),
                                         options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(
                                             egress=res.EgressCondition(host="127.0.0.2"))]))
            phase = Stream(runner.stub.RunPhase(request, timeout=120))
            await phase.wait_for(lambda e: e.HasField("gateway")
                                 and e.gateway.kind == ev.GATEWAY_EVENT_KIND_EGRESS_HELD)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium)
                try:
                    page = await browser.new_page(viewport={"width": 1360, "height": 900})
                    page.on("pageerror", lambda exc: errors.append(str(exc)))
                    await page.goto(runner.server.web.url + "#/jobs/job-web/phases/p")
                    card = page.locator("[data-testid=held-request]")
                    await card.wait_for(timeout=WAIT_MS)
                    assert address in await card.inner_text()
                    await page.fill("[data-testid=egress-reason]", "no deploys from a phase")
                    await page.click("[data-testid=egress-deny]")
                    await card.wait_for(state="detached", timeout=WAIT_MS)
                    await page.locator("[data-testid=event-log] .line", has_text="denied by admin").wait_for(
                        timeout=WAIT_MS)
                finally:
                    await browser.close()
            events, result = await phase.finish()
    assert errors == []
    assert result.status == res.PHASE_STATUS_SUCCEEDED
    (output,) = [e.tool_call_finished.content_preview for e in events if e.HasField("tool_call_finished")]
    assert "denied by the operator: no deploys from a phase" in output

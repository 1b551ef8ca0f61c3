"""The dashboard in a real browser (headless Chromium via Playwright) against a real CLI phase.

The server runs in offline mode (the real CLI, real tools, a scripted Messages API); a breakpoint
holds the call that creates a file. The page must show the phase live, show the held call,
and let a click on Approve run the tool; a dropped connection in between must cost no event and
duplicate none. Screenshots land in test-artifacts/dashboard/ (docs/dashboard.png is one of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from playwright.async_api import async_playwright
from support.browser import artifacts_dir

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.servicer import RunnerServicer
from helix_runner.api.web import start_web
from helix_runner.offline import Reply, Script

pytestmark = pytest.mark.real_cli

JOB, PHASE, PROJECT = "dashboard-demo", "build", "demo"
WAIT_MS = 30_000


async def held_call(page, text: str):
    """The held call whose input shows ``text``, located by its tool_use id (editing hides the text)."""
    card = page.locator("[data-testid=held-call]", has_text=text)
    await card.wait_for(timeout=WAIT_MS)
    tool_use_id = await card.get_attribute("data-tool-use-id")
    return page.locator(f"[data-testid=held-call][data-tool-use-id='{tool_use_id}']")


async def _read(call, events: list, results: list) -> None:
    async for response in call:
        events.extend(response.events)
        if response.HasField("result"):
            results.append(response.result)


async def test_dashboard_follows_a_phase_and_approves_a_held_call(
    claude_binary, runner_factory, chromium, tmp_path
):
    shots = artifacts_dir("dashboard")
    # Offline mode as `scripts/serve --offline-script` runs it: the server starts the scripted API.
    script = tmp_path / "script.json"
    turns = [
        Reply.tool_use("Bash", {"command": "ls -la"}, text="Let me look around first."),
        Reply.tool_use("Bash", {"command": "touch approved.txt"}),
        Reply.tool_use("Bash", {"command": "cat missing-file"}),
        Reply.text("Created approved.txt."),
    ]
    script.write_text(json.dumps(Script(turns).to_dict()))
    async with runner_factory(None, web_port=0, offline_script=str(script)) as runner:
        web = runner.server.web
        assert web is not None
        hold_touch = res.Breakpoint(
            breakpoint_id="touch", input_pattern=res.InputPatternCondition(regex=r"\btouch\b")
        )
        request = pb.RunPhaseRequest(
            job_id=JOB,
            phase_id=PHASE,
            project_id=PROJECT,
            prompt="create approved.txt",
            working_dir=str(runner.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[hold_touch]),
        )
        events: list = []
        results: list = []
        reader = asyncio.create_task(_read(runner.stub.RunPhase(request, timeout=120), events, results))
        target = runner.workdir / "approved.txt"
        errors: list[str] = []
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium)
                page = await browser.new_page(viewport={"width": 1360, "height": 900})
                page.on("pageerror", lambda exc: errors.append(str(exc)))

                # The jobs list shows the job live; from there to the job, then to the phase.
                await page.goto(web.url)
                await page.locator(f"tr[data-job='{JOB}'] a").wait_for(timeout=WAIT_MS)
                # Offline, the page says its dollar figures are what the tokens would cost.
                offline = page.locator("[data-testid=offline]")
                await offline.wait_for(timeout=WAIT_MS)
                assert "nothing is billed" in await offline.inner_text()
                await page.screenshot(path=shots / "jobs.png")
                row, empty = (
                    page.locator(f"tr[data-job='{JOB}']"),
                    page.locator("[data-testid=jobs] td.empty"),
                )
                await page.fill("[data-testid=project-filter]", "another-project")
                await empty.wait_for(timeout=WAIT_MS)
                await page.fill("[data-testid=project-filter]", PROJECT)
                await row.wait_for(timeout=WAIT_MS)
                await page.select_option("[data-testid=status-filter]", label="succeeded")
                await row.wait_for(state="detached", timeout=WAIT_MS)
                await page.select_option("[data-testid=status-filter]", label="active")
                await row.wait_for(timeout=WAIT_MS)
                await page.locator(f"tr[data-job='{JOB}'] a").click()
                await page.locator(f"tr[data-phase='{PHASE}'] a").click(timeout=WAIT_MS)

                held = page.locator("[data-testid=held-call][data-tool=Bash]")
                await held.wait_for(timeout=WAIT_MS)
                assert "touch approved.txt" in await held.inner_text()
                await page.locator("[data-testid=event-log] .line", has_text="breakpoint hit").wait_for(
                    timeout=WAIT_MS
                )
                await page.wait_for_selector(
                    "[data-testid=phase-status][data-status=AWAITING_APPROVAL]", timeout=WAIT_MS
                )
                assert not target.exists(), "the held call must not have run"
                await page.screenshot(path=shots / "held.png", full_page=True)

                # Drop the page's connection: the HTTP port restarts while the phase waits.
                port = web.port
                await web.stop(0.2)
                runner.server.web = web = await start_web(
                    RunnerServicer(runner.server.service, runner.server.queries), host="127.0.0.1", port=port
                )
                await page.wait_for_selector(
                    "[data-testid=connection]:not([data-reconnects='0'])", timeout=WAIT_MS
                )

                await held.locator("[data-testid=approve]").click()
                await page.wait_for_selector(
                    "[data-testid=phase-status][data-status=SUCCEEDED]", timeout=60_000
                )
                assert target.exists(), "approving in the page ran the tool"
                await page.locator("[data-testid=result]", has_text="Created approved.txt.").wait_for(
                    timeout=WAIT_MS
                )
                await held.wait_for(state="detached", timeout=WAIT_MS)

                # Every event once, in order, across the reconnect (the gRPC stream is the reference).
                await asyncio.wait_for(reader, 30)
                last = events[-1].sequence
                connection = page.locator("[data-testid=connection]")
                await page.wait_for_selector(
                    f"[data-testid=connection][data-last-sequence='{last}']", timeout=WAIT_MS
                )
                assert await connection.get_attribute("data-duplicates") == "0"
                assert await connection.get_attribute("data-missing") == "0"
                logged = [
                    int(s)
                    for s in await page.locator("[data-testid=event-log] .line").evaluate_all(
                        "lines => lines.map(l => l.dataset.seq)"
                    )
                ]
                summarized = [e.sequence for e in events if not e.HasField("partial_delta")]
                assert logged == summarized
                assert int(await connection.get_attribute("data-reconnects")) >= 1

                # The charts drew: a bar per tool call, cost points, a model's bars.
                assert await page.get_attribute("[data-testid=timeline]", "data-drawn") == "3"
                assert int(await page.get_attribute("[data-testid=cost-chart]", "data-drawn")) >= 1
                assert int(await page.get_attribute("[data-testid=model-chart]", "data-drawn")) >= 1
                stats = await page.locator("[data-testid=tool-stats] tbody tr").all_inner_texts()
                assert len(stats) == 1 and stats[0].split()[:3] == ["Bash", "3", "1"]
                await page.screenshot(path=shots / "phase.png", full_page=True)

                await page.goto(f"{web.url}#/costs?project={PROJECT}")
                await page.wait_for_selector(
                    "[data-testid=cost-by-phase]:not([data-drawn='0'])", timeout=WAIT_MS
                )
                await page.screenshot(path=shots / "costs.png", full_page=True)
                await browser.close()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    assert results and results[0].status == res.PHASE_STATUS_SUCCEEDED, results
    assert errors == [], errors


async def test_dashboard_edits_one_held_call_and_denies_another(
    claude_binary, runner_factory, chromium, tmp_path
):
    script = tmp_path / "script.json"
    turns = [
        Reply.tool_use("Bash", {"command": "touch original.txt"}),
        Reply.tool_use("Bash", {"command": "rm -rf precious"}),
        Reply.text("Understood."),
    ]
    script.write_text(json.dumps(Script(turns).to_dict()))
    async with runner_factory(None, web_port=0, offline_script=str(script)) as runner:
        (runner.workdir / "precious").mkdir()
        request = pb.RunPhaseRequest(
            job_id="edit-deny",
            phase_id="p",
            prompt="go",
            working_dir=str(runner.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")]),
        )
        events: list = []
        results: list = []
        reader = asyncio.create_task(_read(runner.stub.RunPhase(request, timeout=120), events, results))
        errors: list[str] = []
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium)
                page = await browser.new_page(viewport={"width": 1360, "height": 900})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(f"{runner.server.web.url}#/jobs/edit-deny/phases/p")

                first = await held_call(page, "original.txt")
                # Issue 22 item 14: the CLI has reported no cost yet (no turn result): the jobs list
                # says so as the phase page does ("–"), not "$0.0000"; the computed figure is there.
                await page.goto(runner.server.web.url)
                job_row = page.locator("tr[data-job='edit-deny']")
                await job_row.wait_for(timeout=WAIT_MS)
                assert await job_row.locator("[data-testid=reported]").inner_text() == "–"
                assert (await job_row.locator("[data-testid=computed]").inner_text()).startswith("$0.0")
                await page.goto(f"{runner.server.web.url}#/jobs/edit-deny/phases/p")
                first = await held_call(page, "original.txt")
                await first.get_by_role("button", name="Edit…").click()
                await first.locator("[data-testid=edit-input]").fill('{"command": "touch edited.txt"}')
                await first.locator("[data-testid=run-edited]").click()

                second = await held_call(page, "rm -rf precious")
                await second.get_by_role("button", name="Deny…").click()
                await second.locator("[data-testid=deny-message]").fill("not the precious data")
                await second.locator("[data-testid=deny]").click()

                await page.wait_for_selector(
                    "[data-testid=phase-status][data-status=SUCCEEDED]", timeout=60_000
                )
                log = await page.locator("[data-testid=event-log]").inner_text()
                assert "tool edited" in log and "tool denied" in log and "not the precious data" in log
                await page.screenshot(path=artifacts_dir("dashboard") / "edit-deny.png", full_page=True)
                await browser.close()
            await asyncio.wait_for(reader, 30)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        assert (runner.workdir / "edited.txt").exists() and not (runner.workdir / "original.txt").exists()
        assert (runner.workdir / "precious").is_dir()
    assert results and results[0].status == res.PHASE_STATUS_SUCCEEDED, results
    assert errors == [], errors

"""The ``helix-runner webhooks`` verb against the real server: create (secret shown once), list, deliveries, delete."""

from __future__ import annotations

import json

from support.cli_verbs import helix
from support.webhook_receiver import WebhookReceiver

from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.webhook_http.signing import new_secret


async def test_create_list_deliveries_and_delete(runner_factory, tmp_path):
    receiver = WebhookReceiver(new_secret()).start()
    secret_file = tmp_path / "secret"
    secret_file.write_text(receiver.secret + "\n")
    try:
        async with runner_factory(None, webhook_private_allow=[receiver.allow]) as runner:
            address = f"127.0.0.1:{runner.server.port}"
            made = await helix(address, "webhooks", "create", "--url", receiver.url, "--event", "queue.full",
                               "--event", "phase.finished", "--status", "failed", "--secret-file", str(secret_file))
            assert made.code == 0, made.err
            webhook_id = made.lines[0].split()[2]
            assert "secret:" not in made.out  # the caller gave it: never printed
            generated = await helix(address, "webhooks", "create", "--url", "https://hooks.example.com/x",
                                    "--event", "job.finished", "--format", "slack")
            assert generated.lines[1].startswith("secret: whsec_")  # made by the server: printed this once
            listed = await helix(address, "webhooks", "list")
            assert listed.code == 0 and webhook_id in listed.out and "queue.full,phase.finished" in listed.out
            assert "FAILED" in listed.out and "slack" in listed.out and "whsec_" not in listed.out

            runner.server.service.webhooks.queue_full("job-q", "p", "default", RunnerError(
                ErrorKind.RESOURCE_EXHAUSTED, "QUEUE_FULL", "the admission queue is full", {"scope": "server"}))
            await receiver.arrived(1)
            log = await helix(address, "webhooks", "deliveries", "--webhook", webhook_id, "--attempts")
            assert log.code == 0 and "queue.full" in log.out and "job-q" in log.out and "DELIVERED" in log.out
            as_json = json.loads((await helix(address, "webhooks", "deliveries", "--json", "--state", "delivered")).out)
            assert [d["attempts"][0]["statusCode"] for d in as_json] == [200]

            deleted = await helix(address, "webhooks", "delete", webhook_id)
            assert deleted.code == 0 and f"deleted webhook {webhook_id}" in deleted.out
            missing = await helix(address, "webhooks", "delete", webhook_id)
            assert missing.code == 4 and "does not exist" in missing.err
            bad = await helix(address, "webhooks", "create", "--url", "http://10.0.0.1/h", "--event", "queue.full")
            assert bad.code == 4 and "10.0.0.1 is a private address" in bad.err
    finally:
        receiver.stop()

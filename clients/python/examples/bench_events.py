"""Benchmark program (driven by benchmarks/bench_clients.py): runs one phase and reports, as JSON,
how many events arrived, when the first and last arrived, and the live latency of every assistant
text that carries a ``ts=<unix ns>`` stamp written by the benchmark's fake CLI.

    python examples/bench_events.py ADDRESS WORKDIR JOB_ID PROMPT
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from helix_runner_client import RunnerClient, pb


async def main(address: str, workdir: str, job_id: str, prompt: str) -> None:
    events, first, last, latencies = 0, 0, 0, []
    async with RunnerClient(address) as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id=job_id, prompt=prompt, working_dir=workdir))
        async for event in phase:
            now = time.time_ns()
            if events == 0:
                first = now
            last = now
            events += 1
            text = event.assistant_text
            if text is not None and text.text.startswith("ts="):
                latencies.append(now - int(text.text[3:].split(" ", 1)[0]))
    status = phase.result.status.proto_name if phase.result else ""
    print(json.dumps({"events": events, "first_ns": first, "last_ns": last, "status": status,
                      "latencies_ns": latencies}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))

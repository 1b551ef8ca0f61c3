"""Runs one phase and prints its events as they arrive, then the result.

    python examples/run_phase.py [--addr 127.0.0.1:50051] [--job-id ID] [--allow TOOL]... --workdir DIR PROMPT

The working directory must be inside one of the server's workspace roots. The first line names the
job and phase, for ``examples/watch_phase.py JOB_ID PHASE_ID``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from helix_runner_client import RunnerClient, RunnerError, event_kind, pb


def summary(event: pb.StreamEvent) -> str:
    kind = event_kind(event)
    if kind == "status_changed":
        change = event.status_changed
        return f"{change.from_status.proto_name} -> {change.to_status.proto_name}"
    if kind == "assistant_text":
        return event.assistant_text.text
    if kind == "tool_call_started":
        return f"{event.tool_call_started.name} {event.tool_call_started.input_json}"
    if kind == "tool_call_finished":
        done = event.tool_call_finished
        return f"{done.name} error={str(done.is_error).lower()} {done.content_preview.rstrip()}"
    if kind == "turn_result":
        return f"{event.turn_result.subtype} turns={event.turn_result.num_turns}"
    return ""


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    parser.add_argument("--job-id", default=f"example-{os.getpid()}")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--allow", action="append", default=[], help="allowed tool (repeatable)")
    parser.add_argument("prompt")
    args = parser.parse_args()

    request = pb.RunPhaseRequest(
        job_id=args.job_id,
        prompt=args.prompt,
        working_dir=args.workdir,
        options=pb.PhaseOptions(allowed_tools=args.allow),
    )
    async with RunnerClient(args.addr) as client:
        phase = client.run_phase(request)
        try:
            async for event in phase:
                if event.sequence == 1:  # the ids examples/watch_phase.py re-attaches with
                    print(f"job {event.job_id} phase {event.phase_id}")
                print(f"#{event.sequence:<4} {event_kind(event):<20} {summary(event)}")
        except RunnerError as err:
            print(f"error: {err}", dict(err.metadata), file=sys.stderr)
            return 1
    result = phase.result
    text = result.result_text.splitlines()[0] if result.result_text else ""
    print(f"{result.status.proto_name} ({result.reason}): {text}")
    return 0 if result.status == pb.PhaseStatus.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

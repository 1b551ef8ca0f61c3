"""Attaches to a running or finished phase from a sequence cursor; prints its events, then the result.

    python examples/watch_phase.py [--addr 127.0.0.1:50051] JOB_ID PHASE_ID [AFTER_SEQUENCE]
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from helix_runner_client import RunnerClient, RunnerError, event_kind


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    parser.add_argument("job_id")
    parser.add_argument("phase_id")
    parser.add_argument("after_sequence", nargs="?", type=int, default=0)
    args = parser.parse_args()

    async with RunnerClient(args.addr) as client:
        phase = client.watch_phase(args.job_id, args.phase_id, args.after_sequence)
        try:
            async for event in phase:
                print(f"#{event.sequence:<4} {event_kind(event)}")
        except RunnerError as err:
            print(f"error: {err}", dict(err.metadata), file=sys.stderr)
            return 1
    result = phase.result
    print(f"{result.status.proto_name} ({result.reason}) last_sequence={result.last_sequence}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

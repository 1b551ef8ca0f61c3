import asyncio, sys
from helix_runner_client import RunnerClient, event_kind, pb

async def main(address: str, working_dir: str) -> None:
    async with RunnerClient(address) as client:
        phase = client.run_phase(pb.RunPhaseRequest(job_id="quickstart", prompt="Say hello", working_dir=working_dir))
        async for event in phase:
            print(event.sequence, event_kind(event))
        result = phase.result
        print("job", result.job_id, "phase", result.phase_id)  # what watch_phase needs
        print(result.status.proto_name, result.result_text)

asyncio.run(main(*sys.argv[1:3]))

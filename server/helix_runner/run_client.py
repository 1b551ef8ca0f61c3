"""``helix-runner run``: runs one phase through the API and shows its progress live.

On a terminal the progress is one line redrawn in place (current tool, tool counts, tokens,
cost); otherwise each notable event is printed on its own line. The final status and the CLI's
exit code come last. Exit status: 0 for SUCCEEDED, 1 for any other final status, 2 for a
rejected request or an unreachable server.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

import grpc

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.api.errors import error_info
from helix_runner.api.event_summary import describe


@dataclass
class Progress:
    """What the progress line shows, updated from events."""

    current_tool: str = ""
    tools: Counter = field(default_factory=Counter)
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    events: int = 0

    def line(self, elapsed: float) -> str:
        tools = ", ".join(f"{n}×{c}" for n, c in self.tools.most_common(4)) or "none yet"
        current = f" | running {self.current_tool}" if self.current_tool else ""
        return (f"[{elapsed:6.1f}s] tools: {tools} ({self.failures} failed){current} | tokens in/out "
                f"{self.input_tokens}/{self.output_tokens} | ${self.cost_usd:.4f}")


def update(progress: Progress, event) -> None:
    progress.events += 1
    kind = event.WhichOneof("payload")
    if kind == "tool_call_started":
        progress.tools[event.tool_call_started.name] += 1
        progress.current_tool = event.tool_call_started.name
    elif kind == "tool_call_finished":
        progress.current_tool = ""
        progress.failures += event.tool_call_finished.is_error
    elif kind == "cost_update":
        cost = event.cost_update.cost
        progress.input_tokens = cost.tokens.input_tokens + cost.tokens.cache_read_input_tokens
        progress.output_tokens = cost.tokens.output_tokens
        progress.cost_usd = cost.reported_usd if cost.HasField("reported_usd") else cost.computed_usd


def run(target: str, request: pb.RunPhaseRequest, *, token: str | None = None, out: TextIO = sys.stdout) -> int:
    """Runs the phase and renders it; returns the command's exit status."""
    tty = out.isatty()
    progress = Progress()
    started = time.monotonic()
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    result = None
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.RunnerServiceStub(channel)
        try:
            for response in stub.RunPhase(request, metadata=metadata):
                for event in response.events:
                    update(progress, event)
                    if tty:
                        out.write("\r\x1b[2K" + progress.line(time.monotonic() - started))
                    elif (text := describe(event)) is not None:
                        out.write(text + "\n")
                out.flush()
                if response.HasField("result"):
                    result = response.result
        except grpc.RpcError as exc:
            info = error_info(exc)
            reason = f" [{info.reason}]" if info else ""
            out.write(f"\nhelix-runner: {exc.code().name}: {exc.details()}{reason}\n")
            return 2
    if tty:
        out.write("\n")
    if result is None:
        out.write("helix-runner: the stream ended without a result\n")
        return 1
    status = res.PhaseStatus.Name(result.status).removeprefix("PHASE_STATUS_")
    exit_text = (f"exit code {result.exit_code}" if result.HasField("exit_code")
                 else f"signal {result.exit_signal}" if result.exit_signal else "no exit status")
    cost = result.cost.reported_usd if result.cost.HasField("reported_usd") else result.cost.computed_usd
    out.write(f"{status}: {result.reason}\n  job {result.job_id} phase {result.phase_id}, {exit_text}, "
              f"{result.result_count} result(s), {progress.events} events, ${cost:.4f}\n")
    if result.result_text:
        out.write(f"  result: {result.result_text[:500]}\n")
    return 0 if result.status == res.PHASE_STATUS_SUCCEEDED else 1


def build_request(*, prompt: str, workdir: str, job_id: str | None, phase_id: str | None, project_id: str,
                  model: str, allowed_tools: list[str], max_turns: int, timeout: float) -> pb.RunPhaseRequest:
    options = pb.PhaseOptions(model=model, allowed_tools=allowed_tools, max_turns=max_turns)
    if timeout:
        options.timeout.FromNanoseconds(int(timeout * 1e9))
    return pb.RunPhaseRequest(job_id=job_id or f"cli-{uuid.uuid4().hex[:8]}", phase_id=phase_id or "",
                              project_id=project_id, prompt=prompt, working_dir=workdir, options=options)

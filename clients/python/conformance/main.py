"""Conformance program for the Python client: runs every scenario against a live server and prints
the normalized JSON transcript (see conformance/README.md; the runner compares it with golden.json).

    python conformance/main.py --address HOST:PORT --workdir DIR --scenarios conformance/scenarios.json --prefix ID
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from helix_runner_client import RunnerClient, RunnerError, event_kind, pb

STREAM_TIMEOUT = 90.0


class Normalizer:
    def __init__(self, prefix: str):
        self.replacements: list[tuple[str, str]] = [(prefix, "<P>")]

    def __call__(self, text: str) -> str:
        for old, new in self.replacements:
            text = text.replace(old, new)
        return text


def project_event(event: pb.StreamEvent, started: set[str]) -> dict[str, Any] | None:
    """The stable part of an event; None for kinds whose presence depends on timing or the CLI."""
    kind = event_kind(event)
    if kind == "status_changed":
        e = event.status_changed
        return {"kind": kind, "from": e.from_status.proto_name, "to": e.to_status.proto_name}
    if kind == "session_init":
        return {"kind": kind}
    if kind == "tool_call_started":
        e = event.tool_call_started
        started.add(e.tool_use_id)
        return {"kind": kind, "name": e.name, "input_json": e.input_json}
    if kind == "tool_call_finished":
        e = event.tool_call_finished
        return {"kind": kind, "name": e.name, "is_error": e.is_error, "content_preview": e.content_preview,
                "matches_a_start": e.tool_use_id in started}
    if kind == "assistant_text":
        return {"kind": kind, "text": event.assistant_text.text}
    if kind == "control":
        e = event.control
        return {"kind": kind, "control_kind": e.kind.proto_name, "tool_name": e.tool_name,
                "breakpoint_id": e.breakpoint_id}
    if kind == "turn_result":
        e = event.turn_result
        return {"kind": kind, "subtype": e.subtype, "is_error": e.is_error, "num_turns": e.num_turns,
                "result_text": e.result_text}
    return None  # cost_update is throttled by time; see last_cost_update


def last_cost_update(events: list[pb.StreamEvent]) -> dict[str, Any] | None:
    updates = [e.cost_update.cost for e in events if event_kind(e) == "cost_update"]
    return project_phase_cost(updates[-1]) if updates else None


def project_events(events: list[pb.StreamEvent]) -> list[dict[str, Any]]:
    started: set[str] = set()
    return [p for p in (project_event(e, started) for e in events) if p is not None]


def completed_a_tool(events: list[pb.StreamEvent]) -> bool:
    """Whether a tool call finished without error: one cancelled while it ran ends killed, or not at all."""
    return any(event_kind(e) == "tool_call_finished" and not e.tool_call_finished.is_error for e in events)


def gap_free(events: list[pb.StreamEvent], first: int = 1) -> bool:
    return [e.sequence for e in events] == list(range(first, first + len(events)))


def project_phase_cost(cost: pb.PhaseCost) -> dict[str, Any]:
    return {
        "reported_usd": cost.reported_usd,
        "computed_usd": cost.computed_usd,
        "computed_only": cost.computed_only,
        "input_tokens": cost.tokens.input_tokens,
        "output_tokens": cost.tokens.output_tokens,
        "models": [project_model_cost(m) for m in cost.models],
        "unpriced_models": list(cost.unpriced_models),
    }


def project_model_cost(m: pb.ModelCost) -> dict[str, Any]:
    return {"model": m.model, "input_tokens": m.tokens.input_tokens, "output_tokens": m.tokens.output_tokens,
            "pricing_source": m.pricing_source.proto_name}


def project_totals(t: pb.CostTotals) -> dict[str, Any]:
    return {
        "reported_usd": t.reported_usd,
        "computed_usd": t.computed_usd,
        "input_tokens": t.tokens.input_tokens,
        "output_tokens": t.tokens.output_tokens,
        "phase_count": t.phase_count,
        "computed_only_phase_count": t.computed_only_phase_count,
        "models": [project_model_cost(m) for m in t.models],
        "unpriced_models": list(t.unpriced_models),
    }


def project_scope(project: pb.CostTotals, job: pb.CostTotals) -> dict[str, Any]:
    """Project totals also hold the cancelled phases, whose partial usage depends on when they were killed."""
    return {
        "phase_count": project.phase_count,
        "computed_only_phase_count": project.computed_only_phase_count,
        "reported_usd": project.reported_usd,
        "models": [m.model for m in project.models],
        "unpriced_models": list(project.unpriced_models),
        "covers_the_job": project.computed_usd >= job.computed_usd
        and project.tokens.input_tokens >= job.tokens.input_tokens,
    }


def project_tool_stats(stats: list[pb.ToolStats]) -> list[dict[str, Any]]:
    return [{"name": s.name, "count": s.count, "failures": s.failures, "unfinished": s.unfinished} for s in stats]


def project_result(r: pb.PhaseResult, norm: Normalizer) -> dict[str, Any]:
    return {
        "job_id": norm(r.job_id),
        "phase_id": r.phase_id,
        "status": r.status.proto_name,
        "reason": norm(r.reason),
        "result_subtype": r.result_subtype,
        "is_error": r.is_error,
        "exit_code": r.exit_code,
        "num_turns": r.num_turns,
        "result_text": r.result_text,
        "result_count": r.result_count,
        "errors": list(r.errors),
        "cost": project_phase_cost(r.cost),
        "tool_stats": project_tool_stats(r.tool_stats),
        "has_session_id": bool(r.session_id),
        "has_start_and_end_time": r.start_time is not None and r.end_time is not None,
    }


def project_drain(events: list[pb.StreamEvent], result: pb.PhaseResult, moved_from: list[str],
                  norm: Normalizer) -> dict[str, Any]:
    """What a caller of a phase that moved must see: every event once and in order, the steps run
    once each, the move told to the hook, and the attempts on their replicas."""
    return {
        "gap_free": gap_free(events),
        "last_sequence_is_last_event": bool(events) and result.last_sequence == events[-1].sequence,
        "moved_from": moved_from,
        "steps": [e.tool_call_finished.content_preview.strip() for e in events
                  if event_kind(e) == "tool_call_finished"],
        "status": result.status.proto_name,
        "result_text": result.result_text,
        "attempts": [{"number": a.number, "end_kind": a.end_kind.proto_name, "replica_id": a.replica_id,
                      "reason": norm(a.reason)} for a in result.attempts],
    }


def project_error(rpc: str, err: RunnerError, norm: Normalizer) -> dict[str, Any]:
    return {
        "rpc": rpc,
        "code": err.code.name,
        "message": norm(err.message),
        "domain": err.domain,
        "reason": err.reason,
        "metadata": {k: norm(v) for k, v in sorted(err.metadata.items())},
    }


class Scenarios:
    def __init__(self, client: RunnerClient, spec: dict[str, Any], prefix: str, workdir: str):
        self.client = client
        self.spec = spec
        self.prefix = prefix
        self.workdir = workdir
        self.norm = Normalizer(prefix)
        self.out: dict[str, Any] = {}

    def job(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def request(self, scenario: dict[str, Any], env: dict[str, str] | None = None) -> pb.RunPhaseRequest:
        options = self.spec["options"]
        return pb.RunPhaseRequest(
            job_id=self.job(scenario["job"]), phase_id=scenario["phase_id"], project_id=self.prefix,
            prompt=scenario["prompt"], working_dir=self.workdir,
            options=pb.PhaseOptions(model=options["model"], allowed_tools=list(options["allowed_tools"]), env=env),
        )

    def long_tool_request(self, scenario: dict[str, Any]) -> tuple[pb.RunPhaseRequest, Path]:
        """The request of a cancel scenario and the file its tool writes once it really runs."""
        started = Path(self.workdir) / f"{self.job(scenario['job'])}.started"
        return self.request(scenario, {self.spec["long_tool"]["env"]: str(started)}), started

    async def _until_running(self, started: Path) -> bool:
        """Waits (bounded) until the tool's process wrote its file: then it is running, not just announced."""
        deadline = time.monotonic() + self.spec["long_tool"]["wait_seconds"]
        while not await asyncio.to_thread(started.exists):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def run_phase(self) -> None:
        spec = self.spec["run"]
        phase = self.client.run_phase(self.request(spec))
        events, result = await asyncio.wait_for(phase.collect(), STREAM_TIMEOUT)
        self.run_events, self.run_result = events, result
        self.out["run_phase"] = {
            "events": project_events(events),
            "gap_free": gap_free(events),
            "ids_match": all(e.job_id == self.job(spec["job"]) and e.phase_id == spec["phase_id"] for e in events),
            "last_sequence_is_last_event": result.last_sequence == events[-1].sequence,
            "last_cost_update": last_cost_update(events),
            "result": project_result(result, self.norm),
        }

    async def watch_from_cursor(self) -> None:
        spec = self.spec["run"]
        cursor = next(e.sequence for e in self.run_events if event_kind(e) == "tool_call_started")
        phase = self.client.watch_phase(self.job(spec["job"]), spec["phase_id"], cursor)
        events, result = await asyncio.wait_for(phase.collect(), STREAM_TIMEOUT)
        tail = [(e.sequence, event_kind(e)) for e in self.run_events if e.sequence > cursor]
        self.out["watch_from_cursor"] = {
            "cursor_event": "tool_call_started",
            "gap_free_after_cursor": gap_free(events, cursor + 1),
            "same_as_run_tail": [(e.sequence, event_kind(e)) for e in events] == tail,
            "events": project_events(events),
            "result_status": result.status.proto_name,
            "result_last_sequence_matches_run": result.last_sequence == self.run_result.last_sequence,
        }

    async def get_job(self) -> None:
        job = await self.client.get_job(self.job(self.spec["run"]["job"]))
        self.out["get_job"] = {
            "job_id": self.norm(job.job_id),
            "project_id": self.norm(job.project_id),
            "status": job.status.proto_name,
            "has_times": job.create_time is not None and job.update_time is not None,
            "phases": [
                {
                    "phase_id": p.phase_id,
                    "status": p.status.proto_name,
                    "status_reason": self.norm(p.status_reason),
                    "prompt": p.prompt,
                    "model": p.model,
                    "last_sequence_matches_result": p.last_sequence == self.run_result.last_sequence,
                    "result_status": p.result.status.proto_name if p.result else None,
                    "tool_stats": project_tool_stats(p.tool_stats),
                }
                for p in job.phases
            ],
            "cost": project_totals(job.cost),
        }

    async def list_tool_calls(self) -> None:
        response = await self.client.list_tool_calls(self.job(self.spec["run"]["job"]))
        starts = {e.tool_call_started.tool_use_id: e.sequence for e in self.run_events
                  if event_kind(e) == "tool_call_started"}
        self.out["list_tool_calls"] = {
            "tool_calls": [
                {
                    "phase_id": c.phase_id,
                    "name": c.name,
                    "status": c.status.proto_name,
                    "input_json": c.input_json,
                    "result_preview": c.result_preview,
                    "start_sequence_matches_event": starts.get(c.tool_use_id) == c.start_sequence,
                    "ends_after_start": c.end_sequence > c.start_sequence,
                }
                for c in response.tool_calls
            ],
            "stats": project_tool_stats(response.stats),
            "next_page_token": response.next_page_token,
        }

    async def _until_tool_started(self, phase) -> list[pb.StreamEvent]:
        seen: list[pb.StreamEvent] = []
        async for event in phase:
            seen.append(event)
            if event_kind(event) == "tool_call_started":
                return seen
        raise AssertionError("the phase ended before its tool call started")

    async def cancel_phase(self) -> None:
        spec = self.spec["cancel"]
        request, started = self.long_tool_request(spec)
        phase = self.client.run_phase(request)
        before = await asyncio.wait_for(self._until_tool_started(phase), STREAM_TIMEOUT)
        running = await self._until_running(started)
        cancelled = await self.client.cancel_phase(self.job(spec["job"]), spec["phase_id"], spec["reason"])
        rest, result = await asyncio.wait_for(phase.collect(), STREAM_TIMEOUT)
        events = before + rest
        self.out["cancel_phase"] = {
            "events_until_cancel": project_events(before),
            "tool_running_when_cancelled": running and not completed_a_tool(events),
            "cancel_returned": {"job_id": self.norm(cancelled.job_id), "phase_id": cancelled.phase_id},
            "gap_free": gap_free(events),
            "last_event": project_events(events[-1:]),
            "result": {"status": result.status.proto_name, "reason": self.norm(result.reason)},
        }

    async def client_cancel(self) -> None:
        spec = self.spec["client_cancel"]
        request, started = self.long_tool_request(spec)
        async with self.client.run_phase(request) as phase:
            before = await asyncio.wait_for(self._until_tool_started(phase), STREAM_TIMEOUT)
            running = await self._until_running(started)
        # Leaving the block cancelled the call; the server cancels the phase. Watch it end.
        watch = self.client.watch_phase(self.job(spec["job"]), spec["phase_id"], 0)
        events, result = await asyncio.wait_for(watch.collect(), STREAM_TIMEOUT)
        self.out["client_cancel"] = {
            "events_until_cancel": project_events(before),
            "tool_running_when_cancelled": running and not completed_a_tool(events),
            "watched": {
                "gap_free": gap_free(events),
                "starts_like_the_run": [e.sequence for e in events[: len(before)]] == [e.sequence for e in before],
                "last_event": project_events(events[-1:]),
                "result": {"status": result.status.proto_name, "reason": self.norm(result.reason)},
            },
        }

    async def breakpoint_approve(self) -> None:
        spec = self.spec["breakpoint"]
        job, phase_id = self.job(spec["job"]), spec["phase_id"]
        request = self.request(spec)
        request.options.breakpoints = [pb.Breakpoint(breakpoint_id=spec["breakpoint_id"], tool_name=spec["tool_name"])]
        phase = self.client.run_phase(request)
        events: list[pb.StreamEvent] = []
        pending = None
        async with asyncio.timeout(STREAM_TIMEOUT):
            async for event in phase:
                events.append(event)
                if event_kind(event) == "control" and event.control.kind == pb.ControlEventKind.BREAKPOINT_HIT:
                    inspection = (await self.client.call(
                        "inspect_phase", pb.InspectPhaseRequest(job_id=job, phase_id=phase_id))).inspection
                    pending = [{"name": p.call.name, "input_json": p.call.input_json, "breakpoint_id": p.breakpoint_id}
                               for p in inspection.pending_calls]
                    await self.client.call("resolve_tool_call", pb.ResolveToolCallRequest(
                        job_id=job, phase_id=phase_id, tool_use_id=event.control.tool_use_id,
                        approve=pb.ApproveDecision()))
        self.out["breakpoint_approve"] = {
            "events": project_events(events),
            "gap_free": gap_free(events),
            "pending_at_hit": pending,
            "result": {"status": phase.result.status.proto_name, "reason": self.norm(phase.result.reason)},
        }

    async def list_jobs(self) -> None:
        size = self.spec["list_jobs"]["page_size"]
        pages, token = [], ""
        while True:
            page = await self.client.list_jobs(project_id=self.prefix, page_size=size, page_token=token)
            pages.append([{"job_id": self.norm(j.job_id), "status": j.status.proto_name, "phases": len(j.phases)}
                          for j in page.jobs])
            token = page.next_page_token
            if not token:
                break
        cancelled = await self.client.list_jobs(project_id=self.prefix, statuses=[pb.PhaseStatus.CANCELLED])
        self.out["list_jobs"] = {
            "pages": pages,
            "cancelled_only": [self.norm(j.job_id) for j in cancelled.jobs],
        }

    async def cost_totals(self) -> None:
        job = await self.client.get_cost_totals(job_id=self.job(self.spec["run"]["job"]))
        phase = await self.client.get_cost_totals(job_id=self.job(self.spec["run"]["job"]),
                                                  phase_id=self.spec["run"]["phase_id"])
        project = await self.client.get_cost_totals(project_id=self.prefix)
        self.out["cost_totals"] = {"phase": project_totals(phase), "job": project_totals(job),
                                   "project": project_scope(project, job)}

    async def errors(self) -> None:
        spec = self.spec["errors"]
        run = self.spec["run"]
        cursor = spec["cursor"]
        last = self.run_result.last_sequence
        calls: list[tuple[str, Any]] = [
            ("GetJob", lambda: self.client.get_job(self.job(spec["missing_job"]))),
            ("WatchPhase", lambda: self.client.watch_phase(self.job(run["job"]), spec["missing_phase"]).collect()),
            ("WatchPhase", lambda: self.client.watch_phase(self.job(run["job"]), run["phase_id"], cursor).collect()),
            ("RunPhase", lambda: self.client.run_phase(self.request(run)).collect()),
            ("RunPhase", lambda: self.client.run_phase(
                pb.RunPhaseRequest(job_id=self.job("invalid"), prompt="", working_dir=self.workdir)).collect()),
            ("PausePhase", lambda: self.client.call(
                "pause_phase", pb.PausePhaseRequest(job_id=self.job(run["job"]), phase_id=run["phase_id"]))),
        ]
        # The cursor error names the phase's last sequence: keep the transcript independent of it.
        norm = Normalizer(self.prefix)
        norm.replacements += [(str(cursor), "<cursor>"), (str(last), "<last_sequence>")]
        out = []
        for rpc, call in calls:
            try:
                await asyncio.wait_for(call(), STREAM_TIMEOUT)
                out.append({"rpc": rpc, "code": "OK"})
            except RunnerError as err:
                out.append(project_error(rpc, err, norm))
        self.out["errors"] = out

    async def retried_phase(self) -> None:
        spec = self.spec["retry"]
        request = self.request(spec, dict(spec["env"]))
        request.options.retry = pb.RetryPolicy(
            max_attempts=spec["max_attempts"], disable_jitter=True,
            initial_backoff=datetime.timedelta(milliseconds=spec["initial_backoff_ms"]),
            max_backoff=datetime.timedelta(milliseconds=spec["max_backoff_ms"]))
        events, result = await asyncio.wait_for(self.client.run_phase(request).collect(), STREAM_TIMEOUT)
        attempt_controls = (pb.ControlEventKind.ATTEMPT_STARTED, pb.ControlEventKind.RETRY_SCHEDULED)
        self.out["retried_phase"] = {
            "gap_free": gap_free(events),
            "controls": [
                {"control_kind": e.control.kind.proto_name, "attempt": e.control.attempt,
                 "max_attempts": e.control.max_attempts, "end_kind": e.control.end_kind.proto_name,
                 "resumes_a_session": bool(e.control.resumed_session_id)}
                for e in events if event_kind(e) == "control" and e.control.kind in attempt_controls
            ],
            "result": {
                "status": result.status.proto_name,
                "result_text": result.result_text,
                "attempts": [
                    {"number": a.number, "status": a.status.proto_name, "end_kind": a.end_kind.proto_name,
                     "retryable": a.retryable, "api_error_status": a.api_error_status,
                     "resumed_the_first_session": bool(a.resumed_session_id)
                     and a.resumed_session_id == result.attempts[0].session_id}
                    for a in result.attempts
                ],
            },
        }

    async def worktree_phase(self) -> None:
        spec = self.spec["worktree"]
        job, phase_id = self.job(spec["job"]), spec["phase_id"]
        request = self.request(spec)
        request.working_dir = str(Path(self.workdir) / f"{self.prefix}-{spec['repo']}")
        request.options.workspace = pb.WorkspaceMode.GIT_WORKTREE
        events, result = await asyncio.wait_for(self.client.run_phase(request).collect(), STREAM_TIMEOUT)
        art = result.artifacts
        chunks, token, pages, total = [], "", 0, -1
        while True:
            page = await self.client.call("get_phase_diff", pb.GetPhaseDiffRequest(
                job_id=job, phase_id=phase_id, page_size=spec["page_size"], page_token=token))
            chunks.append(page.chunk)
            pages += 1
            total = page.total_bytes
            token = page.next_page_token
            if not token or pages > 1000:
                break
        paged = b"".join(chunks)
        self.out["worktree_phase"] = {
            "events": project_events(events),
            "gap_free": gap_free(events),
            "result": {"status": result.status.proto_name, "result_text": result.result_text},
            "artifacts": {
                "git_available": art.git_available,
                "branch": self.norm(art.branch),
                "has_base_commit": bool(art.base_commit),
                "changed_files": [{"path": f.path, "status": f.status, "lines_added": f.lines_added,
                                   "lines_deleted": f.lines_deleted} for f in art.changed_files],
                "diff_non_empty": bool(art.diff),
                "diff_truncated": art.diff_truncated,
                "diff_bytes_match": art.diff_bytes == len(art.diff.encode()),
            },
            "paged_diff": {
                "several_pages": pages > 1,
                "total_bytes_match": total == len(paged),
                "equals_the_result_diff": paged.decode() == art.diff,
            },
        }

    async def drain_follow(self) -> None:
        """RunPhase while the runner drains the serving replica: the stream follows the phase to the
        adopter by itself (one move told to the hook) and is one gap-free stream to the result."""
        spec = self.spec["drain"]
        moves: list[Any] = []
        request, _started = self.long_tool_request(spec)
        phase = self.client.run_phase(request, on_move=moves.append)
        events, result = await asyncio.wait_for(phase.collect(), spec["timeout_seconds"])
        self.out["drain_follow"] = project_drain(events, result, [m.from_replica for m in moves], self.norm)

async def run(args: argparse.Namespace, spec: dict[str, Any]) -> int:
    async with RunnerClient(args.address, timeout=30) as client:
        s = Scenarios(client, spec, args.prefix, args.workdir)
        steps = (s.run_phase, s.watch_from_cursor, s.get_job, s.list_tool_calls, s.cancel_phase,
                 s.client_cancel, s.breakpoint_approve, s.list_jobs, s.cost_totals, s.errors,
                 s.retried_phase, s.worktree_phase)
        if args.scenario == "drain":  # run by the runner alone, against two replicas (README)
            steps = (s.drain_follow,)
        for step in steps:
            await step()
    json.dump(s.out, sys.stdout, indent=2, sort_keys=True)
    print()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--scenarios", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--scenario", choices=("all", "drain"), default="all")
    args = parser.parse_args()
    with open(args.scenarios) as f:
        spec = json.load(f)
    return asyncio.run(run(args, spec))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as exc:  # pragma: no cover - reported by the runner
        print(f"unexpected gRPC error: {exc}", file=sys.stderr)
        sys.exit(1)

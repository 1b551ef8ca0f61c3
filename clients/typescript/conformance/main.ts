// Conformance program for the TypeScript client: runs every scenario against a live server and
// prints the normalized JSON transcript (see conformance/README.md; the runner compares it with
// conformance/golden.json, which the other clients' programs must match too).
//
//   node dist/conformance/main.js --address HOST:PORT --workdir DIR --scenarios conformance/scenarios.json --prefix ID
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Code } from "@connectrpc/connect";
import {
  AttemptEndKindSchema,
  ControlEventKind,
  ControlEventKindSchema,
  createRunnerClient,
  enumName,
  eventKind,
  PhaseStatus,
  PhaseStatusSchema,
  PricingSourceSchema,
  RunnerError,
  runPhase,
  ToolCallStatusSchema,
  watchPhase,
  WorkspaceMode,
  type CostTotals,
  type ModelCost,
  type PhaseCost,
  type PhaseMove,
  type PhaseResult,
  type PhaseStream,
  type RunnerClient,
  type StreamEvent,
  type ToolStats,
} from "@helix/runner-client";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { PhaseOptionsSchema, RunPhaseRequestSchema } from "@helix/runner-client";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
const STREAM_TIMEOUT_MS = 90_000;

class Normalizer {
  constructor(readonly replacements: [string, string][]) {}
  apply(text: string): string {
    for (const [from, to] of this.replacements) text = text.split(from).join(to);
    return text;
  }
}

const status = (value: PhaseStatus): string => enumName(PhaseStatusSchema, value);

/** The stable part of an event; null for kinds whose presence depends on timing or the CLI. */
function projectEvent(event: StreamEvent, started: Set<string>): Json | null {
  const kind = eventKind(event);
  const p = event.payload;
  switch (p.case) {
    case "statusChanged":
      return { kind, from: status(p.value.fromStatus), to: status(p.value.toStatus) };
    case "sessionInit":
      return { kind };
    case "toolCallStarted":
      started.add(p.value.toolUseId);
      return { kind, name: p.value.name, input_json: p.value.inputJson };
    case "toolCallFinished":
      return {
        kind,
        name: p.value.name,
        is_error: p.value.isError,
        content_preview: p.value.contentPreview,
        matches_a_start: started.has(p.value.toolUseId),
      };
    case "assistantText":
      return { kind, text: p.value.text };
    case "control":
      return {
        kind,
        control_kind: enumName(ControlEventKindSchema, p.value.kind),
        tool_name: p.value.toolName,
        breakpoint_id: p.value.breakpointId,
      };
    case "turnResult":
      return {
        kind,
        subtype: p.value.subtype,
        is_error: p.value.isError,
        num_turns: p.value.numTurns,
        result_text: p.value.resultText,
      };
    default:
      return null; // cost_update is throttled by time: see last_cost_update
  }
}

function projectEvents(events: StreamEvent[]): Json[] {
  const started = new Set<string>();
  return events.map((e) => projectEvent(e, started)).filter((p): p is Json => p !== null);
}

const gapFree = (events: StreamEvent[], first = 1n): boolean =>
  events.every((e, i) => e.sequence === first + BigInt(i));

const projectModelCost = (m: ModelCost): Json => ({
  model: m.model,
  input_tokens: Number(m.tokens?.inputTokens ?? 0n),
  output_tokens: Number(m.tokens?.outputTokens ?? 0n),
  pricing_source: enumName(PricingSourceSchema, m.pricingSource),
});

function projectPhaseCost(cost: PhaseCost | undefined): Json {
  return {
    reported_usd: cost?.reportedUsd ?? null,
    computed_usd: cost?.computedUsd ?? 0,
    computed_only: cost?.computedOnly ?? false,
    input_tokens: Number(cost?.tokens?.inputTokens ?? 0n),
    output_tokens: Number(cost?.tokens?.outputTokens ?? 0n),
    models: (cost?.models ?? []).map(projectModelCost),
    unpriced_models: cost?.unpricedModels ?? [],
  };
}

function projectTotals(t: CostTotals | undefined): Json {
  return {
    reported_usd: t?.reportedUsd ?? 0,
    computed_usd: t?.computedUsd ?? 0,
    input_tokens: Number(t?.tokens?.inputTokens ?? 0n),
    output_tokens: Number(t?.tokens?.outputTokens ?? 0n),
    phase_count: t?.phaseCount ?? 0,
    computed_only_phase_count: t?.computedOnlyPhaseCount ?? 0,
    models: (t?.models ?? []).map(projectModelCost),
    unpriced_models: t?.unpricedModels ?? [],
  };
}

/** Project totals also hold the cancelled phases, whose partial usage depends on when they were killed. */
const projectScope = (project: CostTotals, job: CostTotals): Json => ({
  phase_count: project.phaseCount,
  computed_only_phase_count: project.computedOnlyPhaseCount,
  reported_usd: project.reportedUsd,
  models: project.models.map((m) => m.model),
  unpriced_models: project.unpricedModels,
  covers_the_job:
    project.computedUsd >= job.computedUsd && (project.tokens?.inputTokens ?? 0n) >= (job.tokens?.inputTokens ?? 0n),
});

const projectToolStats = (stats: ToolStats[]): Json =>
  stats.map((s) => ({ name: s.name, count: Number(s.count), failures: Number(s.failures), unfinished: Number(s.unfinished) }));

function lastCostUpdate(events: StreamEvent[]): Json {
  for (let i = events.length - 1; i >= 0; i--) {
    const p = events[i]!.payload;
    if (p.case === "costUpdate") return projectPhaseCost(p.value.cost);
  }
  return null;
}

/** What a caller of a phase that moved must see: every event once and in order, the steps run once
 * each, the move told to the hook, and the attempts on their replicas. */
function projectDrain(events: StreamEvent[], result: PhaseResult, movedFrom: string[], norm: Normalizer): Json {
  const steps: Json[] = [];
  for (const e of events) if (e.payload.case === "toolCallFinished") steps.push(e.payload.value.contentPreview.trim());
  return {
    gap_free: gapFree(events),
    last_sequence_is_last_event: events.length > 0 && events.at(-1)!.sequence === result.lastSequence,
    moved_from: movedFrom,
    steps,
    status: status(result.status),
    result_text: result.resultText,
    attempts: result.attempts.map((a) => ({
      number: a.number,
      end_kind: enumName(AttemptEndKindSchema, a.endKind),
      replica_id: a.replicaId,
      reason: norm.apply(a.reason),
    })),
  };
}

function projectResult(r: PhaseResult, norm: Normalizer): Json {
  return {
    job_id: norm.apply(r.jobId),
    phase_id: r.phaseId,
    status: status(r.status),
    reason: norm.apply(r.reason),
    result_subtype: r.resultSubtype,
    is_error: r.isError,
    exit_code: r.exitCode ?? null,
    num_turns: r.numTurns,
    result_text: r.resultText,
    result_count: r.resultCount,
    errors: r.errors,
    cost: projectPhaseCost(r.cost),
    tool_stats: projectToolStats(r.toolStats),
    has_session_id: r.sessionId !== "",
    has_start_and_end_time: r.startTime !== undefined && r.endTime !== undefined,
  };
}

/** The canonical gRPC code name (`NOT_FOUND`); Connect spells CANCELLED with one L. */
function codeName(code: Code): string {
  if (code === Code.Canceled) return "CANCELLED";
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

function projectError(rpc: string, err: RunnerError, norm: Normalizer): Json {
  const metadata: Record<string, Json> = {};
  for (const key of Object.keys(err.metadata).sort()) metadata[key] = norm.apply(err.metadata[key]!);
  return {
    rpc,
    code: codeName(err.code),
    message: norm.apply(err.rawMessage),
    domain: err.domain ?? null,
    reason: err.reason ?? null,
    metadata,
  };
}

function withTimeout<T>(promise: Promise<T>, ms = STREAM_TIMEOUT_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function untilToolStarted(iterator: AsyncIterator<StreamEvent>): Promise<StreamEvent[]> {
  const seen: StreamEvent[] = [];
  for (;;) {
    const next = await iterator.next();
    if (next.done) throw new Error("the phase ended before its tool call started");
    seen.push(next.value);
    if (eventKind(next.value) === "tool_call_started") return seen;
  }
}

/** Whether a tool call finished without error: one cancelled while it ran ends killed, or not at all. */
function completedATool(events: StreamEvent[]): boolean {
  return events.some((e) => e.payload.case === "toolCallFinished" && !e.payload.value.isError);
}

async function drain(iterator: AsyncIterator<StreamEvent>): Promise<StreamEvent[]> {
  const rest: StreamEvent[] = [];
  for (let next = await iterator.next(); !next.done; next = await iterator.next()) rest.push(next.value);
  return rest;
}

class Scenarios {
  readonly out: Record<string, Json> = {};
  readonly norm: Normalizer;
  runEvents: StreamEvent[] = [];
  runResult!: PhaseResult;

  constructor(
    readonly client: RunnerClient,
    readonly spec: any,
    readonly prefix: string,
    readonly workdir: string,
  ) {
    this.norm = new Normalizer([[prefix, "<P>"]]);
  }

  job(name: string): string {
    return `${this.prefix}-${name}`;
  }

  request(name: string, options: MessageInitShape<typeof PhaseOptionsSchema> = {}): MessageInitShape<typeof RunPhaseRequestSchema> {
    const scenario = this.spec[name];
    return {
      jobId: this.job(scenario.job),
      phaseId: scenario.phase_id,
      projectId: this.prefix,
      prompt: scenario.prompt,
      workingDir: this.workdir,
      options: { model: this.spec.options.model, allowedTools: this.spec.options.allowed_tools, ...options },
    };
  }

  /** The request of a cancel scenario and the file its tool writes once it really runs. */
  longToolRequest(name: string): [MessageInitShape<typeof RunPhaseRequestSchema>, string] {
    const started = join(this.workdir, `${this.job(this.spec[name].job)}.started`);
    return [this.request(name, { env: { [this.spec.long_tool.env]: started } }), started];
  }

  /** Waits (bounded) until the tool's process wrote its file: then it is running, not just announced. */
  async untilRunning(started: string): Promise<boolean> {
    const deadline = Date.now() + this.spec.long_tool.wait_seconds * 1000;
    while (!existsSync(started)) {
      if (Date.now() > deadline) return false;
      await sleep(50);
    }
    return true;
  }

  async runPhase(): Promise<void> {
    const { events, result } = await withTimeout(runPhase(this.client, this.request("run")).collect());
    const jobId = this.job(this.spec.run.job);
    this.runEvents = events;
    this.runResult = result;
    this.out.run_phase = {
      events: projectEvents(events),
      gap_free: gapFree(events),
      ids_match: events.every((e) => e.jobId === jobId && e.phaseId === this.spec.run.phase_id),
      last_sequence_is_last_event: events.at(-1)?.sequence === result.lastSequence,
      last_cost_update: lastCostUpdate(events),
      result: projectResult(result, this.norm),
    };
  }

  /** RunPhase while the runner drains the serving replica: the stream follows the phase to the
   * adopter by itself (one move told to the hook) and is one gap-free stream to the result. */
  async drainFollow(): Promise<void> {
    const moves: PhaseMove[] = [];
    const [request] = this.longToolRequest("drain");
    const phase = runPhase(this.client, request, { onMove: (move) => moves.push(move) });
    const { events, result } = await withTimeout(phase.collect(), this.spec.drain.timeout_seconds * 1000);
    this.out.drain_follow = projectDrain(events, result, moves.map((m) => m.fromReplica), this.norm);
  }

  async watchFromCursor(): Promise<void> {
    const cursor = this.runEvents.find((e) => eventKind(e) === "tool_call_started")!.sequence;
    const phase = watchPhase(this.client, this.job(this.spec.run.job), this.spec.run.phase_id, cursor);
    const { events, result } = await withTimeout(phase.collect());
    const pairs = (list: StreamEvent[]) => list.map((e) => `${e.sequence}:${eventKind(e)}`).join(",");
    this.out.watch_from_cursor = {
      cursor_event: "tool_call_started",
      gap_free_after_cursor: gapFree(events, cursor + 1n),
      same_as_run_tail: pairs(events) === pairs(this.runEvents.filter((e) => e.sequence > cursor)),
      events: projectEvents(events),
      result_status: status(result.status),
      result_last_sequence_matches_run: result.lastSequence === this.runResult.lastSequence,
    };
  }

  async getJob(): Promise<void> {
    const { job } = await this.client.getJob({ jobId: this.job(this.spec.run.job) }, { timeoutMs: 30_000 });
    this.out.get_job = {
      job_id: this.norm.apply(job!.jobId),
      project_id: this.norm.apply(job!.projectId),
      status: status(job!.status),
      has_times: job!.createTime !== undefined && job!.updateTime !== undefined,
      phases: job!.phases.map((p) => ({
        phase_id: p.phaseId,
        status: status(p.status),
        status_reason: this.norm.apply(p.statusReason),
        prompt: p.prompt,
        model: p.model,
        last_sequence_matches_result: p.lastSequence === this.runResult.lastSequence,
        result_status: p.result ? status(p.result.status) : null,
        tool_stats: projectToolStats(p.toolStats),
      })),
      cost: projectTotals(job!.cost),
    };
  }

  async listToolCalls(): Promise<void> {
    const response = await this.client.listToolCalls({ jobId: this.job(this.spec.run.job) }, { timeoutMs: 30_000 });
    const starts = new Map<string, bigint>();
    for (const e of this.runEvents) if (e.payload.case === "toolCallStarted") starts.set(e.payload.value.toolUseId, e.sequence);
    this.out.list_tool_calls = {
      tool_calls: response.toolCalls.map((c) => ({
        phase_id: c.phaseId,
        name: c.name,
        status: enumName(ToolCallStatusSchema, c.status),
        input_json: c.inputJson,
        result_preview: c.resultPreview,
        start_sequence_matches_event: starts.get(c.toolUseId) === c.startSequence,
        ends_after_start: c.endSequence > c.startSequence,
      })),
      stats: projectToolStats(response.stats),
      next_page_token: response.nextPageToken,
    };
  }

  async cancelPhase(): Promise<void> {
    const spec = this.spec.cancel;
    const [request, started] = this.longToolRequest("cancel");
    const phase = runPhase(this.client, request);
    const iterator = phase[Symbol.asyncIterator]();
    const before = await withTimeout(untilToolStarted(iterator));
    const running = await this.untilRunning(started);
    const { phase: cancelled } = await this.client.cancelPhase(
      { jobId: this.job(spec.job), phaseId: spec.phase_id, reason: spec.reason },
      { timeoutMs: 30_000 },
    );
    const rest = await withTimeout(drain(iterator));
    if (!phase.result) throw new Error("the cancelled phase ended without a result");
    const events = [...before, ...rest];
    this.out.cancel_phase = {
      events_until_cancel: projectEvents(before),
      tool_running_when_cancelled: running && !completedATool(events),
      cancel_returned: { job_id: this.norm.apply(cancelled!.jobId), phase_id: cancelled!.phaseId },
      gap_free: gapFree(events),
      last_event: projectEvents(events.slice(-1)),
      result: { status: status(phase.result.status), reason: this.norm.apply(phase.result.reason) },
    };
  }

  async clientCancel(): Promise<void> {
    const spec = this.spec.client_cancel;
    const [request, started] = this.longToolRequest("client_cancel");
    const phase: PhaseStream = runPhase(this.client, request);
    const before = await withTimeout(untilToolStarted(phase[Symbol.asyncIterator]()));
    const running = await this.untilRunning(started);
    // Cancelling the call makes the server cancel the phase. Watch it end.
    phase.cancel();
    const { events, result } = await withTimeout(watchPhase(this.client, this.job(spec.job), spec.phase_id).collect());
    this.out.client_cancel = {
      events_until_cancel: projectEvents(before),
      tool_running_when_cancelled: running && !completedATool(events),
      watched: {
        gap_free: gapFree(events),
        starts_like_the_run: before.every((e, i) => events[i]?.sequence === e.sequence),
        last_event: projectEvents(events.slice(-1)),
        result: { status: status(result.status), reason: this.norm.apply(result.reason) },
      },
    };
  }

  async breakpointApprove(): Promise<void> {
    const spec = this.spec.breakpoint;
    const jobId = this.job(spec.job);
    const request = this.request("breakpoint", {
      breakpoints: [{ breakpointId: spec.breakpoint_id, condition: { case: "toolName", value: spec.tool_name } }],
    });
    const phase = runPhase(this.client, request);
    const events: StreamEvent[] = [];
    let pending: Json = null;
    const run = async () => {
      for await (const event of phase) {
        events.push(event);
        if (event.payload.case === "control" && event.payload.value.kind === ControlEventKind.BREAKPOINT_HIT) {
          const { inspection } = await this.client.inspectPhase({ jobId, phaseId: spec.phase_id }, { timeoutMs: 30_000 });
          pending = (inspection?.pendingCalls ?? []).map((p) => ({
            name: p.call?.name ?? "",
            input_json: p.call?.inputJson ?? "",
            breakpoint_id: p.breakpointId,
          }));
          await this.client.resolveToolCall(
            { jobId, phaseId: spec.phase_id, toolUseId: event.payload.value.toolUseId, decision: { case: "approve", value: {} } },
            { timeoutMs: 30_000 },
          );
        }
      }
    };
    await withTimeout(run());
    this.out.breakpoint_approve = {
      events: projectEvents(events),
      gap_free: gapFree(events),
      pending_at_hit: pending,
      result: { status: status(phase.result!.status), reason: this.norm.apply(phase.result!.reason) },
    };
  }

  async listJobs(): Promise<void> {
    const pages: Json[] = [];
    let pageToken = "";
    do {
      const page = await this.client.listJobs(
        { projectId: this.prefix, pageSize: this.spec.list_jobs.page_size, pageToken },
        { timeoutMs: 30_000 },
      );
      pages.push(page.jobs.map((j) => ({ job_id: this.norm.apply(j.jobId), status: status(j.status), phases: j.phases.length })));
      pageToken = page.nextPageToken;
    } while (pageToken);
    const cancelled = await this.client.listJobs(
      { projectId: this.prefix, statuses: [PhaseStatus.CANCELLED] },
      { timeoutMs: 30_000 },
    );
    this.out.list_jobs = { pages, cancelled_only: cancelled.jobs.map((j) => this.norm.apply(j.jobId)) };
  }

  async costTotals(): Promise<void> {
    const jobId = this.job(this.spec.run.job);
    const get = async (request: { projectId?: string; jobId?: string; phaseId?: string }) =>
      (await this.client.getCostTotals(request, { timeoutMs: 30_000 })).totals;
    const phase = await get({ jobId, phaseId: this.spec.run.phase_id });
    const job = await get({ jobId });
    const project = await get({ projectId: this.prefix });
    this.out.cost_totals = { phase: projectTotals(phase), job: projectTotals(job), project: projectScope(project!, job!) };
  }

  async errors(): Promise<void> {
    const spec = this.spec.errors;
    const run = this.spec.run;
    const cursor = BigInt(spec.cursor);
    // The cursor error names the phase's last sequence: keep the transcript independent of it.
    const norm = new Normalizer([
      [this.prefix, "<P>"],
      [String(cursor), "<cursor>"],
      [String(this.runResult.lastSequence), "<last_sequence>"],
    ]);
    const calls: [string, () => Promise<unknown>][] = [
      ["GetJob", () => this.client.getJob({ jobId: this.job(spec.missing_job) }, { timeoutMs: 30_000 })],
      ["WatchPhase", () => watchPhase(this.client, this.job(run.job), spec.missing_phase).collect()],
      ["WatchPhase", () => watchPhase(this.client, this.job(run.job), run.phase_id, cursor).collect()],
      ["RunPhase", () => runPhase(this.client, this.request("run")).collect()],
      ["RunPhase", () => runPhase(this.client, { jobId: this.job("invalid"), prompt: "", workingDir: this.workdir }).collect()],
      ["PausePhase", () => this.client.pausePhase({ jobId: this.job(run.job), phaseId: run.phase_id }, { timeoutMs: 30_000 })],
    ];
    const out: Json[] = [];
    for (const [rpc, call] of calls) {
      try {
        await withTimeout(call());
        out.push({ rpc, code: "OK" });
      } catch (error) {
        out.push(projectError(rpc, RunnerError.from(error), norm));
      }
    }
    this.out.errors = out;
  }

  async retriedPhase(): Promise<void> {
    const spec = this.spec.retry;
    const millis = (ms: number) => ({ seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 });
    const request = this.request("retry", {
      env: spec.env,
      retry: {
        maxAttempts: spec.max_attempts,
        initialBackoff: millis(spec.initial_backoff_ms),
        maxBackoff: millis(spec.max_backoff_ms),
        disableJitter: true,
      },
    });
    const { events, result } = await withTimeout(runPhase(this.client, request).collect());
    const attemptControls = [ControlEventKind.ATTEMPT_STARTED, ControlEventKind.RETRY_SCHEDULED];
    const controls: Json[] = [];
    for (const e of events) {
      if (e.payload.case !== "control" || !attemptControls.includes(e.payload.value.kind)) continue;
      const c = e.payload.value;
      controls.push({
        control_kind: enumName(ControlEventKindSchema, c.kind),
        attempt: c.attempt,
        max_attempts: c.maxAttempts,
        end_kind: enumName(AttemptEndKindSchema, c.endKind),
        resumes_a_session: c.resumedSessionId !== "",
      });
    }
    const firstSession = result.attempts[0]?.sessionId ?? "";
    this.out.retried_phase = {
      gap_free: gapFree(events),
      controls,
      result: {
        status: status(result.status),
        result_text: result.resultText,
        attempts: result.attempts.map((a) => ({
          number: a.number,
          status: status(a.status),
          end_kind: enumName(AttemptEndKindSchema, a.endKind),
          retryable: a.retryable,
          api_error_status: a.apiErrorStatus ?? null,
          resumed_the_first_session: a.resumedSessionId !== "" && a.resumedSessionId === firstSession,
        })),
      },
    };
  }

  async worktreePhase(): Promise<void> {
    const spec = this.spec.worktree;
    const jobId = this.job(spec.job);
    const request = {
      ...this.request("worktree", { workspace: WorkspaceMode.GIT_WORKTREE }),
      workingDir: join(this.workdir, `${this.prefix}-${spec.repo}`),
    };
    const { events, result } = await withTimeout(runPhase(this.client, request).collect());
    const art = result.artifacts;
    const chunks: Uint8Array[] = [];
    let pageToken = "";
    let pages = 0;
    let total = -1n;
    do {
      const page = await this.client.getPhaseDiff(
        { jobId, phaseId: spec.phase_id, pageSize: spec.page_size, pageToken },
        { timeoutMs: 30_000 },
      );
      chunks.push(page.chunk);
      pages += 1;
      total = page.totalBytes;
      pageToken = page.nextPageToken;
    } while (pageToken && pages <= 1000);
    const paged = Buffer.concat(chunks);
    const diff = art?.diff ?? "";
    this.out.worktree_phase = {
      events: projectEvents(events),
      gap_free: gapFree(events),
      result: { status: status(result.status), result_text: result.resultText },
      artifacts: {
        git_available: art?.gitAvailable ?? false,
        branch: this.norm.apply(art?.branch ?? ""),
        has_base_commit: (art?.baseCommit ?? "") !== "",
        changed_files: (art?.changedFiles ?? []).map((f) => ({
          path: f.path,
          status: f.status,
          lines_added: Number(f.linesAdded),
          lines_deleted: Number(f.linesDeleted),
        })),
        diff_non_empty: diff !== "",
        diff_truncated: art?.diffTruncated ?? false,
        diff_bytes_match: art?.diffBytes === BigInt(Buffer.byteLength(diff)),
      },
      paged_diff: {
        several_pages: pages > 1,
        total_bytes_match: total === BigInt(paged.length),
        equals_the_result_diff: paged.toString("utf8") === diff,
      },
    };
  }
}

const { values } = parseArgs({
  options: {
    address: { type: "string" },
    workdir: { type: "string" },
    scenarios: { type: "string" },
    prefix: { type: "string" },
    scenario: { type: "string", default: "all" },
  },
});
if (!values.address || !values.workdir || !values.scenarios || !values.prefix) {
  console.error("usage: main.js --address HOST:PORT --workdir DIR --scenarios FILE --prefix ID");
  process.exit(2);
}
const s = new Scenarios(
  createRunnerClient({ address: values.address }),
  JSON.parse(readFileSync(values.scenarios, "utf8")),
  values.prefix,
  values.workdir,
);
if (values.scenario === "drain") {
  // Run by the runner alone, against two replicas (conformance/README.md).
  await s.drainFollow();
} else {
  await s.runPhase();
  await s.watchFromCursor();
  await s.getJob();
  await s.listToolCalls();
  await s.cancelPhase();
  await s.clientCancel();
  await s.breakpointApprove();
  await s.listJobs();
  await s.costTotals();
  await s.errors();
  await s.retriedPhase();
  await s.worktreePhase();
}
// Streams cancelled above may leave HTTP/2 sessions open for a moment: exit once the transcript is
// flushed (writes to a pipe are asynchronous in Node) instead of waiting for them.
process.stdout.write(`${JSON.stringify(s.out, null, 2)}\n`, () => process.exit(0));

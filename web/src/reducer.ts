/**
 * The phase view's state, folded from the phase's event stream (WatchPhase batches, then the
 * PhaseResult). Pure: no DOM, no network, so node's test runner checks it (web/test/).
 *
 * The stream is gap-free and ordered by `sequence` (proto/helix/runner/v1/events.proto), and a
 * reconnect resumes from `lastSequence`; anything at or below it is a replay and is dropped, so
 * a reconnect can neither lose nor duplicate an event.
 */
import { timestampMs, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import { plural, usd } from "./format.js";
import {
  ControlEventKind,
  ControlEventKindSchema,
  GatewayEventKind,
  GatewayEventKindSchema,
  PhaseStatus,
  PhaseStatusSchema,
  TaskEventKindSchema,
  enumName,
  type PhaseCost,
  type PhaseResult,
  type StreamEvent,
} from "./proto.js";
import { visible } from "./visible.js";

/** How many log entries the page keeps (the stream itself is complete in the server's store). */
export const LOG_LIMIT = 500;

export type CallStatus = "running" | "held" | "succeeded" | "failed" | "denied" | "unfinished";

export interface CallView {
  id: string;
  name: string;
  input: string;
  /** tool_use id of the Agent/Task call this call ran under ("" on the main thread). */
  parent: string;
  startMs: number;
  endMs: number | undefined;
  status: CallStatus;
  /** What held it: a pause (released by resume/step) or a breakpoint (released by a decision). */
  heldBy: "pause" | "breakpoint" | undefined;
  preview: string;
}

export type Tone = "info" | "text" | "tool" | "ok" | "error" | "control" | "cost" | "muted";

export interface LogEntry {
  seq: number;
  timeMs: number;
  kind: string;
  text: string;
  tone: Tone;
}

export interface CostPoint {
  timeMs: number;
  computedUsd: number;
  reportedUsd: number | null;
}

export interface PhaseView {
  /** Highest sequence applied: the cursor a reconnect resumes from. */
  lastSequence: number;
  /** Events applied (each sequence once). */
  eventCount: number;
  /** Events dropped because their sequence was already applied (replays after a reconnect). */
  duplicates: number;
  /** Sequence numbers that never arrived (must stay 0: the stream is gap-free). */
  missing: number;
  status: PhaseStatus;
  statusReason: string;
  firstMs: number | undefined;
  lastMs: number | undefined;
  model: string;
  calls: Record<string, CallView>;
  /** tool_use ids in start order. */
  callOrder: string[];
  log: LogEntry[];
  cost: PhaseCost | undefined;
  costSeries: CostPoint[];
  result: PhaseResult | undefined;
  /** Bumped by control actions and status changes: the page then re-reads held calls. */
  controlVersion: number;
  /** Rewinds in place (REWOUND control events): the events after `after` up to `to` are superseded. */
  rewound: { after: number; to: number }[];
  /** Network requests a breakpoint holds, by hold id, until an EGRESS_APPROVED / EGRESS_DENIED event. */
  egressHolds: Record<string, EgressHoldView>;
}

export interface EgressHoldView {
  holdId: string;
  destination: string;
  method: string;
  path: string;
  breakpointId: string;
  sinceMs: number | undefined;
}

export type Action =
  | { type: "events"; events: readonly StreamEvent[] }
  | { type: "result"; result: PhaseResult };

export function initialView(): PhaseView {
  return {
    lastSequence: 0,
    eventCount: 0,
    duplicates: 0,
    missing: 0,
    status: PhaseStatus.UNSPECIFIED,
    statusReason: "",
    firstMs: undefined,
    lastMs: undefined,
    model: "",
    calls: {},
    callOrder: [],
    log: [],
    cost: undefined,
    costSeries: [],
    result: undefined,
    controlVersion: 0,
    rewound: [],
    egressHolds: {},
  };
}

/** Whether a rewind in place superseded the event `seq` (it stays in the history, marked). */
export function isRewound(view: PhaseView, seq: number): boolean {
  return view.rewound.some((r) => seq > r.after && seq <= r.to);
}

export function reduce(view: PhaseView, action: Action): PhaseView {
  return action.type === "events" ? applyEvents(view, action.events) : applyResult(view, action.result);
}

function applyEvents(view: PhaseView, events: readonly StreamEvent[]): PhaseView {
  const fresh = events.filter((e) => Number(e.sequence) > view.lastSequence);
  const duplicates = view.duplicates + (events.length - fresh.length);
  if (fresh.length === 0) return duplicates === view.duplicates ? view : { ...view, duplicates };
  const next: PhaseView = {
    ...view,
    duplicates,
    calls: { ...view.calls },
    callOrder: [...view.callOrder],
    costSeries: [...view.costSeries],
  };
  const entries: LogEntry[] = [];
  const seen = new Set<number>();
  for (const event of fresh) {
    const seq = Number(event.sequence);
    if (seen.has(seq) || seq <= next.lastSequence) {
      next.duplicates++;
      continue;
    }
    seen.add(seq);
    next.missing += Math.max(0, seq - next.lastSequence - 1);
    next.lastSequence = seq;
    next.eventCount++;
    const timeMs = ms(event.receiveTime) ?? next.lastMs ?? 0;
    next.firstMs ??= timeMs;
    next.lastMs = timeMs;
    apply(next, event, timeMs);
    const line = summarize(event);
    if (line) entries.push({ seq, timeMs, ...line, text: visible(line.text) });  // what a phase wrote, inert (visible.ts)
  }
  next.log = entries.length ? [...view.log, ...entries].slice(-LOG_LIMIT) : view.log;
  return next;
}

/** Folds one event into `view` (a private copy). */
function apply(view: PhaseView, event: StreamEvent, timeMs: number): void {
  const p = event.payload;
  switch (p.case) {
    case "sessionInit":
      view.model = p.value.model || view.model;
      break;
    case "toolCallStarted": {
      const v = p.value;
      if (!view.calls[v.toolUseId]) view.callOrder.push(v.toolUseId);
      view.calls[v.toolUseId] = {
        id: v.toolUseId,
        name: v.name,
        input: v.inputJson,
        parent: event.parentToolUseId,
        startMs: timeMs,
        endMs: undefined,
        status: "running",
        heldBy: undefined,
        preview: "",
      };
      break;
    }
    case "toolCallFinished": {
      const v = p.value;
      const call = view.calls[v.toolUseId];
      if (call) {
        const denied = call.status === "denied";
        view.calls[v.toolUseId] = {
          ...call,
          endMs: timeMs,
          status: v.isError ? (denied ? "denied" : "failed") : "succeeded",
          heldBy: undefined,
          preview: v.contentPreview,
        };
      }
      break;
    }
    case "costUpdate":
      if (p.value.cost) {
        view.cost = p.value.cost;
        view.costSeries.push({
          timeMs,
          computedUsd: p.value.cost.computedUsd,
          reportedUsd: p.value.cost.reportedUsd ?? null,
        });
      }
      break;
    case "statusChanged":
      view.status = p.value.toStatus;
      view.statusReason = p.value.reason;
      view.controlVersion++;
      break;
    case "gateway": {
      const g = p.value;
      if (g.kind === GatewayEventKind.EGRESS_HELD) {
        view.egressHolds = { ...view.egressHolds, [g.holdId]: { holdId: g.holdId, destination: g.destination, method: g.method, path: g.path, breakpointId: g.breakpointId, sinceMs: timeMs } };
      } else if ((g.kind === GatewayEventKind.EGRESS_APPROVED || g.kind === GatewayEventKind.EGRESS_DENIED) && g.holdId in view.egressHolds) {
        const { [g.holdId]: _gone, ...rest } = view.egressHolds;
        view.egressHolds = rest;
      }
      break;
    }
    case "control":
      applyControl(view, p.value.kind, p.value.toolUseId, p.value.inputJson);
      if (p.value.kind === ControlEventKind.REWOUND) {
        view.rewound = [...view.rewound, { after: Number(p.value.rewoundAfterSequence), to: Number(p.value.rewoundToSequence) }];
      }
      view.controlVersion++;
      break;
  }
}

function applyControl(view: PhaseView, kind: ControlEventKind, toolUseId: string, inputJson: string): void {
  const set = (id: string, status: CallStatus, heldBy?: "pause" | "breakpoint") => {
    const call = view.calls[id];
    if (call && call.endMs === undefined) view.calls[id] = { ...call, status, heldBy };
  };
  switch (kind) {
    case ControlEventKind.BREAKPOINT_HIT:
      set(toolUseId, "held", "breakpoint");
      break;
    case ControlEventKind.PAUSED:
      if (toolUseId) set(toolUseId, "held", "pause");
      break;
    case ControlEventKind.TOOL_APPROVED:
      set(toolUseId, "running");
      break;
    case ControlEventKind.TOOL_EDITED:
      set(toolUseId, "running");
      // The call runs with the edited input: show that one.
      if (inputJson && view.calls[toolUseId]) view.calls[toolUseId] = { ...view.calls[toolUseId], input: inputJson };
      break;
    case ControlEventKind.TOOL_DENIED:
      set(toolUseId, "denied");
      break;
    case ControlEventKind.RESUMED:
    case ControlEventKind.STEP_COMPLETE:
      // A resume (or the step's own call) releases what the pause held; breakpoint holds stay.
      for (const id of view.callOrder) {
        if (view.calls[id].heldBy === "pause") set(id, "running");
      }
      break;
  }
}

function applyResult(view: PhaseView, result: PhaseResult): PhaseView {
  const calls = { ...view.calls };
  for (const id of view.callOrder) {
    const call = calls[id];
    if (call.endMs === undefined) calls[id] = { ...call, status: "unfinished", heldBy: undefined };
  }
  return {
    ...view,
    calls,
    result,
    status: result.status,
    statusReason: result.reason,
    cost: result.cost ?? view.cost,
    controlVersion: view.controlVersion + 1,
  };
}

// -- selectors --------------------------------------------------------------------------------

export function isTerminal(status: PhaseStatus): boolean {
  return status >= PhaseStatus.SUCCEEDED;
}

/** The tool call in progress: the newest unfinished main-thread call, else any unfinished one. */
export function currentTool(view: PhaseView): CallView | undefined {
  if (view.result) return undefined;
  const open = view.callOrder.map((id) => view.calls[id]).filter((c) => c.endMs === undefined);
  return open.filter((c) => !c.parent).at(-1) ?? open.at(-1);
}

/** Milliseconds from the first event to the result (or to `nowMs` while running). */
export function elapsedMs(view: PhaseView, nowMs: number): number {
  const start = ms(view.result?.startTime) ?? view.firstMs;
  if (start === undefined) return 0;
  const end = ms(view.result?.endTime) ?? (view.result ? view.lastMs : nowMs) ?? nowMs;
  return Math.max(0, end - start);
}

export interface TimelineRow {
  call: CallView;
  /** 0 on the main thread, 1 inside a subagent, and so on. */
  depth: number;
}

/** Calls in start order with each subagent's calls right under the call that spawned them. */
export function timelineRows(view: PhaseView): TimelineRow[] {
  const children = new Map<string, CallView[]>();
  const roots: CallView[] = [];
  for (const id of view.callOrder) {
    const call = view.calls[id];
    if (call.parent && view.calls[call.parent]) {
      const list = children.get(call.parent) ?? [];
      list.push(call);
      children.set(call.parent, list);
    } else {
      roots.push(call);
    }
  }
  const rows: TimelineRow[] = [];
  const visit = (call: CallView, depth: number) => {
    rows.push({ call, depth });
    for (const child of children.get(call.id) ?? []) visit(child, depth + 1);
  };
  for (const root of roots) visit(root, 0);
  return rows;
}

// -- formatting -------------------------------------------------------------------------------

const LABEL_KEYS = ["command", "file_path", "path", "pattern", "url", "query", "description", "prompt"];

/** A short label for a call: its tool and the gist of its input (`Bash ls -la`). */
export function callLabel(call: CallView, limit = 40): string {
  let gist = "";
  try {
    const input = JSON.parse(call.input) as Record<string, unknown>;
    const key = LABEL_KEYS.find((k) => typeof input[k] === "string") ?? Object.keys(input).find((k) => typeof input[k] === "string");
    if (key) gist = String(input[key]);
  } catch {
    gist = "";
  }
  return clip(visible(`${call.name} ${gist}`), limit);
}

export function ms(ts: Timestamp | undefined): number | undefined {
  return ts ? timestampMs(ts) : undefined;
}

export function durationMs(d: Duration | undefined): number | undefined {
  return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : undefined;
}

/** `RUNNING` for PhaseStatus.RUNNING. */
export function statusName(status: PhaseStatus): string {
  return enumName(PhaseStatusSchema, status).replace(/^PHASE_STATUS_/, "");
}

function clip(text: string, limit = 240): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > limit ? `${flat.slice(0, limit - 1)}…` : flat;
}

/** One line for the live event log; `undefined` for events not worth a line (partial deltas). */
export function summarize(event: StreamEvent): { kind: string; text: string; tone: Tone } | undefined {
  const p = event.payload;
  switch (p.case) {
    case "sessionInit":
      return { kind: "init", text: `model ${p.value.model || "?"}, ${plural(p.value.tools.length, "tool")}, turn ${p.value.turnIndex}`, tone: "info" };
    case "assistantText":
      return { kind: "text", text: clip(p.value.text), tone: "text" };
    case "thinking":
      return { kind: "thinking", text: p.value.redacted ? "(redacted)" : clip(p.value.text), tone: "muted" };
    case "toolCallStarted":
      return { kind: "tool", text: `${p.value.name} ${clip(p.value.inputJson, 160)}`, tone: "tool" };
    case "toolCallFinished": {
      const d = durationMs(p.value.duration);
      const took = d === undefined ? "" : ` in ${Math.round(d)} ms`;
      return {
        kind: "result",
        text: `${p.value.name} ${p.value.isError ? "failed" : "done"}${took}${p.value.contentPreview ? `: ${clip(p.value.contentPreview, 160)}` : ""}`,
        tone: p.value.isError ? "error" : "ok",
      };
    }
    case "apiRetry":
      return { kind: "retry", text: `API retry ${p.value.attempt}/${p.value.maxRetries}: ${p.value.error}`, tone: "error" };
    case "apiError":
      return { kind: "api error", text: clip(p.value.message || p.value.error), tone: "error" };
    case "rateLimit":
      return { kind: "rate limit", text: `${p.value.status} (${p.value.rateLimitType})`, tone: "muted" };
    case "task":
      return {
        kind: "task",
        text: `${enumName(TaskEventKindSchema, p.value.kind).replace(/^TASK_EVENT_KIND_/, "").toLowerCase()} ${clip(p.value.description, 120)} ${p.value.status}`,
        tone: "info",
      };
    case "compaction":
      return { kind: "compaction", text: p.value.completed ? `compacted ${p.value.preTokens} → ${p.value.postTokens} tokens` : "compacting…", tone: "muted" };
    case "cliStatus":
      return p.value.status ? { kind: "cli", text: p.value.status, tone: "muted" } : undefined;
    case "hook":
      return { kind: "hook", text: `${p.value.hookName} ${p.value.outcome}`, tone: "muted" };
    case "permissionDenied":
      return { kind: "denied", text: `${p.value.toolName}: ${clip(p.value.message || p.value.decisionReason)}`, tone: "error" };
    case "partialDelta":
      return undefined;
    case "turnResult": {
      const total = p.value.totalCostUsd === undefined ? "" : `, ${usd(p.value.totalCostUsd)} reported`;
      return { kind: "turn", text: `turn ended: ${p.value.subtype} after ${plural(p.value.numTurns, "turn")}${total}`, tone: p.value.isError ? "error" : "ok" };
    }
    case "controlResponse":
      return { kind: "cli answer", text: `${p.value.requestSubtype || p.value.requestId} ${p.value.success ? "ok" : p.value.error}`, tone: "muted" };
    case "controlRequest":
      return { kind: "cli asks", text: `${p.value.subtype} ${p.value.toolName}`, tone: "muted" };
    case "userMessage":
      return { kind: "user", text: clip(p.value.text), tone: "text" };
    case "toolProgress": {
      const d = durationMs(p.value.elapsed) ?? 0;
      return { kind: "progress", text: `${p.value.toolName} running for ${(d / 1000).toFixed(0)} s`, tone: "muted" };
    }
    case "costUpdate": {
      const c = p.value.cost;
      if (!c) return undefined;
      const reported = c.reportedUsd === undefined ? "" : ` · ${usd(c.reportedUsd)} reported`;
      return { kind: "cost", text: `${usd(c.computedUsd)} computed${reported}`, tone: "cost" };
    }
    case "stderr":
      return { kind: "stderr", text: clip(p.value.text), tone: "muted" };
    case "statusChanged":
      return {
        kind: "status",
        text: `${statusName(p.value.fromStatus)} → ${statusName(p.value.toStatus)}${p.value.reason ? `: ${clip(p.value.reason)}` : ""}`,
        tone: "control",
      };
    case "control": {
      const kind = enumName(ControlEventKindSchema, p.value.kind).replace(/^CONTROL_EVENT_KIND_/, "").toLowerCase().replace(/_/g, " ");
      const detail = [p.value.toolName, p.value.breakpointId && `breakpoint ${p.value.breakpointId}`, p.value.message && clip(p.value.message, 120)]
        .filter(Boolean)
        .join(" · ");
      // Who took the action, when a call took it (docs/tenancy.md): "tool approved by alice@team-a".
      const by = p.value.actor ? ` by ${p.value.actor}` : "";
      return { kind: "control", text: detail ? `${kind}${by}: ${detail}` : `${kind}${by}`, tone: "control" };
    }
    case "parseError":
      return { kind: "parse error", text: `line ${p.value.lineNumber} (${p.value.lineBytes} bytes) ${p.value.detail}`, tone: "error" };
    case "unknown":
      return { kind: "unknown", text: `${p.value.type}/${p.value.subtype}`, tone: "muted" };
    case "gateway": {
      if (p.value.kind === GatewayEventKind.EGRESS_CONNECTION) {
        // A connection the egress proxy let through, once it ended: not an error.
        const request = p.value.method ? ` ${p.value.method} ${clip(p.value.path, 120)}`.trimEnd() : "";
        const ms = durationMs(p.value.duration);
        return {
          kind: "egress",
          text: `${clip(p.value.destination, 120)}${request} ↑${p.value.bytesSent} B ↓${p.value.bytesReceived} B${ms === undefined ? "" : ` in ${ms} ms`}`,
          tone: "muted",
        };
      }
      if (p.value.kind === GatewayEventKind.EGRESS_HELD || p.value.kind === GatewayEventKind.EGRESS_APPROVED || p.value.kind === GatewayEventKind.EGRESS_DENIED) {
        // A network breakpoint's request and its decision (docs/network.md): who decided, and why.
        const word = p.value.kind === GatewayEventKind.EGRESS_HELD ? "held" : p.value.kind === GatewayEventKind.EGRESS_APPROVED ? "approved" : "denied";
        const request = p.value.method ? ` ${p.value.method} ${clip(p.value.path, 120)}`.trimEnd() : "";
        const by = p.value.actor ? ` by ${p.value.actor}` : "";
        return {
          kind: "egress",
          text: `${word}${by}: ${clip(p.value.destination, 120)}${request} [${p.value.holdId}]${p.value.message ? ` ${clip(p.value.message, 160)}` : ""}`,
          tone: p.value.kind === GatewayEventKind.EGRESS_DENIED ? "error" : "control",
        };
      }
      const kind = enumName(GatewayEventKindSchema, p.value.kind).replace(/^GATEWAY_EVENT_KIND_/, "").toLowerCase().replace(/_/g, " ");
      const what = p.value.destination || p.value.model;
      return { kind: "gateway", text: `${kind}${what ? ` ${what}` : ""} (HTTP ${p.value.httpStatus}) ${clip(p.value.message, 160)}`, tone: "error" };
    }
    default:
      return undefined;
  }
}

/**
 * One phase, live: WatchPhase from a cursor into the reducer (reconnecting from the last applied
 * sequence after a dropped connection), plus InspectPhase for held calls and tool statistics,
 * and the job-control buttons.
 */
import type { ChartConfiguration } from "chart.js";
import { useEffect, useMemo, useReducer, useRef, useState } from "preact/hooks";
import { client, describeError, isUnauthenticated } from "../api.js";
import { COLORS, ChartCanvas } from "../charts.js";
import { Code } from "@connectrpc/connect";
import {
  EgressHoldDecision,
  InjectMode,
  PauseMode,
  RunnerError,
  watchPhase,
  type PendingToolCall,
  type PhaseMove,
  type PhaseInspection,
  type StreamEvent,
  type ToolStats,
} from "../proto.js";
import {
  callLabel,
  currentTool,
  durationMs,
  elapsedMs,
  initialView,
  isRewound,
  isTerminal,
  ms,
  reduce,
  timelineRows,
  type CallView,
  type EgressHoldView,
  type PhaseView as View,
} from "../reducer.js";
import { clock, duration, href, money, usd, useNow } from "../util.js";
import { Problem, TokenPrompt } from "./common.js";
import { Checkpoints, ForkedFrom } from "./fork.js";
import { StatusBadge } from "./jobs.js";
import { escapedJson, visible } from "../visible.js";

type Connection =
  | { state: "connecting" }
  | { state: "live" }
  | { state: "reconnecting"; attempt: number; error: string }
  | { state: "resumed"; from: number }
  | { state: "moved"; from: string; after: number }
  | { state: "ended" }
  | { state: "failed"; error: string; unauthenticated: boolean };

/** Errors a retry cannot fix; anything else (a dropped connection, a restart) is retried. */
const FINAL_CODES = new Set([Code.NotFound, Code.InvalidArgument, Code.Unauthenticated, Code.PermissionDenied, Code.OutOfRange]);

/** Follows the phase's events from the last applied sequence, reconnecting until the result arrives. */
function usePhaseStream(jobId: string, phaseId: string): [View, Connection, number, PhaseMove[]] {
  const [view, dispatch] = useReducer(reduce, undefined, initialView);
  const [connection, setConnection] = useState<Connection>({ state: "connecting" });
  const [reconnects, setReconnects] = useState(0);
  const [moves, setMoves] = useState<PhaseMove[]>([]);
  useEffect(() => {
    let stopped = false;
    let cursor = 0;
    let current: ReturnType<typeof watchPhase> | undefined;
    let buffer: StreamEvent[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    const flush = () => {
      timer = undefined;
      if (buffer.length) dispatch({ type: "events", events: buffer });
      buffer = [];
    };
    (async () => {
      for (let attempt = 0; !stopped; attempt++) {
        // A drain hands the phase over to another replica: the stream re-attaches by itself
        // (WatchPhase after its last event) and goes on; the page says where it came from.
        const onMove = (move: PhaseMove) => {
          setMoves((all) => [...all, move]);
          setConnection({ state: "moved", from: move.fromReplica, after: Number(move.afterSequence) });
        };
        const stream = (current = watchPhase(client, jobId, phaseId, BigInt(cursor), { onMove }));
        // A Connect stream's headers come with its first message, so "attached" is only known
        // once an event arrives; until then a resumed stream says where it resumed from.
        if (attempt > 0) setConnection({ state: "resumed", from: cursor });
        try {
          for await (const event of stream) {
            if (stopped) return;
            if (buffer.length === 0) setConnection({ state: "live" });
            buffer.push(event);
            cursor = Math.max(cursor, Number(event.sequence));
            timer ??= setTimeout(flush, 50); // one render per burst of events
            attempt = 0;
          }
          clearTimeout(timer);
          flush();
          if (stream.result) dispatch({ type: "result", result: stream.result });
          setConnection({ state: "ended" });
          return;
        } catch (error) {
          clearTimeout(timer);
          flush();
          if (stopped) return;
          const e = RunnerError.from(error);
          if (FINAL_CODES.has(e.code)) {
            setConnection({ state: "failed", error: describeError(e), unauthenticated: isUnauthenticated(e) });
            return;
          }
          setConnection({ state: "reconnecting", attempt: attempt + 1, error: describeError(e) });
          setReconnects((n) => n + 1);
          await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** attempt, 4000)));
        }
      }
    })();
    return () => {
      stopped = true;
      clearTimeout(timer);
      current?.cancel();
    };
  }, [jobId, phaseId]);
  return [view, connection, reconnects, moves];
}

/** InspectPhase after every control action or status change, and every few seconds while live. */
function useInspection(jobId: string, phaseId: string, view: View): [PhaseInspection | undefined, string | undefined, () => void] {
  const [inspection, setInspection] = useState<PhaseInspection>();
  const [error, setError] = useState<string>();
  const [tick, setTick] = useState(0);
  const done = view.result !== undefined;
  useEffect(() => {
    const controller = new AbortController();
    client
      .inspectPhase({ jobId, phaseId }, { signal: controller.signal })
      .then((r) => {
        setInspection(r.inspection);
        setError(undefined);
      })
      .catch((e) => {
        if (!controller.signal.aborted) setError(describeError(e));
      });
    return () => controller.abort();
  }, [jobId, phaseId, view.controlVersion, Math.floor(view.eventCount / 25), done, tick]);
  useEffect(() => {
    if (done) return;
    const id = setInterval(() => setTick((t) => t + 1), 3000);
    return () => clearInterval(id);
  }, [done]);
  return [inspection, error, () => setTick((t) => t + 1)];
}

export function PhaseView({ jobId, phaseId }: { jobId: string; phaseId: string }) {
  const [view, connection, reconnects, moves] = usePhaseStream(jobId, phaseId);
  const [inspection, inspectError, refresh] = useInspection(jobId, phaseId, view);
  const [actionError, setActionError] = useState<string>();
  const done = view.result !== undefined || isTerminal(view.status);
  const now = useNow(!done);
  const tool = currentTool(view);
  const act = async (what: () => Promise<unknown>) => {
    try {
      await what();
      setActionError(undefined);
    } catch (e) {
      setActionError(describeError(e));
    }
    refresh();
  };
  const stats = view.result?.toolStats.length ? view.result.toolStats : (inspection?.phase?.toolStats ?? []);
  const phase = inspection?.phase;
  return (
    <section class="phase">
      <nav class="crumbs">
        <a href="#/">Jobs</a> / <a href={href("jobs", jobId)}>{jobId}</a> / <span>{phaseId}</span>
      </nav>
      <div class="summary">
        <div class="title">
          <h1>{phaseId}</h1>
          <div class="muted" title={phase?.workingDir}>
            {phase?.workingDir}
          </div>
        </div>
        <Stat label="Status">
          <StatusBadge status={view.status || phase?.status || 0} testid="phase-status" />
        </Stat>
        <Stat label="Elapsed">
          <span data-testid="elapsed">{duration(elapsedMs(view, now))}</span>
        </Stat>
        <Stat label="Current tool">
          <span data-testid="current-tool">{tool ? `${visible(tool.name)}${tool.status === "held" ? " (held)" : ""}` : "–"}</span>
        </Stat>
        <Stat label="Cost (computed / CLI)">
          <span data-testid="cost">
            {usd(view.cost?.computedUsd)} / {usd(view.cost?.reportedUsd)}
          </span>
        </Stat>
        <Stat label="Model">{view.model || phase?.model || "–"}</Stat>
        <Stat label="Stream">
          <ConnectionState connection={connection} reconnects={reconnects} moves={moves} view={view} />
        </Stat>
      </div>
      {view.result && (
        <div class={`result ${view.result.isError ? "bad" : ""}`} data-testid="result">
          <strong>Result:</strong> {visible(view.result.reason || view.result.resultSubtype)}
          {view.result.resultText && <pre>{visible(view.result.resultText)}</pre>}
        </div>
      )}
      <Problem error={actionError ?? (connection.state === "failed" ? connection.error : undefined) ?? (done ? undefined : inspectError)} />
      {connection.state === "failed" && connection.unauthenticated && <TokenPrompt />}
      <ForkedFrom jobId={jobId} phaseId={phaseId} origin={phase?.forkedFrom} />
      {!done && <Controls jobId={jobId} phaseId={phaseId} inspection={inspection} act={act} />}
      <HeldCalls jobId={jobId} phaseId={phaseId} pending={done ? [] : (inspection?.pendingCalls ?? [])} act={act} />
      <HeldRequests jobId={jobId} phaseId={phaseId} holds={done ? [] : Object.values(view.egressHolds)} act={act} />
      <div class="panels">
        <div class="panel wide">
          <h2>Tool calls</h2>
          <Timeline view={view} now={now} />
        </div>
        <div class="panel">
          <h2>Cost over time</h2>
          <CostOverTime view={view} />
        </div>
        <div class="panel">
          <h2>Cost by model</h2>
          <CostByModel view={view} />
        </div>
        <div class="panel">
          <h2>Per-tool statistics</h2>
          <ToolStatsTable stats={stats} />
        </div>
        <div class="panel wide">
          <h2>Checkpoints</h2>
          <Checkpoints
            jobId={jobId}
            phaseId={phaseId}
            checkpoints={inspection?.checkpoints ?? []}
            canRewind={!done && ((inspection?.paused ?? false) || (inspection?.pendingCalls.length ?? 0) > 0)}
            act={act}
          />
        </div>
        <div class="panel wide">
          <h2>
            Events <span class="muted">({view.eventCount})</span>
          </h2>
          <EventLog view={view} />
        </div>
      </div>
    </section>
  );
}

function Stat({ label, children }: { label: string; children: preact.ComponentChildren }) {
  return (
    <div class="stat">
      <div class="label">{label}</div>
      <div class="value">{children}</div>
    </div>
  );
}

function ConnectionState({ connection, reconnects, moves, view }: { connection: Connection; reconnects: number; moves: PhaseMove[]; view: View }) {
  const text =
    connection.state === "reconnecting"
      ? `reconnecting (attempt ${connection.attempt})`
      : connection.state === "resumed"
        ? `resumed after #${connection.from}`
        : connection.state === "moved"
          ? `moved from ${connection.from || "a draining replica"} after #${connection.after}; following`
          : connection.state === "failed"
            ? "stopped"
            : connection.state;
  const last = moves.at(-1);
  return (
    <span class={`conn ${connection.state}`} data-testid="connection" data-reconnects={reconnects} data-moves={moves.length} data-last-sequence={view.lastSequence} data-duplicates={view.duplicates} data-missing={view.missing}>
      {text}
      {reconnects > 0 && <span class="muted"> · {reconnects} reconnect{reconnects > 1 ? "s" : ""}</span>}
      {last && connection.state !== "moved" && (
        <span class="muted" data-testid="moved-notice"> · moved from {last.fromReplica || "a draining replica"}{moves.length > 1 ? ` (${moves.length} moves)` : ""}</span>
      )}
    </span>
  );
}

function Controls({
  jobId,
  phaseId,
  inspection,
  act,
}: {
  jobId: string;
  phaseId: string;
  inspection: PhaseInspection | undefined;
  act: (what: () => Promise<unknown>) => Promise<void>;
}) {
  const ids = { jobId, phaseId };
  const [hard, setHard] = useState(false);
  const [confirmCancel, setConfirmCancel] = useState(false);
  const [text, setText] = useState("");
  const [interrupt, setInterrupt] = useState(false);
  const paused = inspection?.paused ?? false;
  return (
    <div class="controls" data-testid="controls">
      <div class="buttons">
        <button onClick={() => act(() => client.pausePhase({ ...ids, mode: hard ? PauseMode.HARD : PauseMode.BEFORE_NEXT_TOOL }))} disabled={paused}>
          Pause
        </button>
        <label class="check" title="SIGSTOP the process group instead of holding the next tool call">
          <input type="checkbox" checked={hard} onChange={(e) => setHard(e.currentTarget.checked)} /> hard
        </label>
        <button onClick={() => act(() => client.resumePhase(ids))}>Resume</button>
        <button onClick={() => act(() => client.stepPhase(ids))} title="let exactly one held tool call run, then hold again">
          Step
        </button>
        <button onClick={() => act(() => client.interruptPhase(ids))} title="interrupt the current turn">
          Interrupt
        </button>
        {confirmCancel ? (
          <>
            <button class="danger" onClick={() => act(() => client.cancelPhase({ ...ids, reason: "cancelled from the dashboard" }))}>
              Confirm cancel
            </button>
            <button onClick={() => setConfirmCancel(false)}>Keep running</button>
          </>
        ) : (
          <button class="danger" onClick={() => setConfirmCancel(true)}>
            Cancel
          </button>
        )}
      </div>
      <form
        class="inject"
        onSubmit={(e) => {
          e.preventDefault();
          if (!text.trim()) return;
          void act(() => client.injectMessage({ ...ids, text, mode: interrupt ? InjectMode.INTERRUPT_AND_SEND : InjectMode.QUEUE })).then(() => setText(""));
        }}
      >
        <input value={text} placeholder="Message to the agent (next user turn)" onInput={(e) => setText(e.currentTarget.value)} />
        <label class="check">
          <input type="checkbox" checked={interrupt} onChange={(e) => setInterrupt(e.currentTarget.checked)} /> interrupt first
        </label>
        <button type="submit">Inject</button>
      </form>
    </div>
  );
}

/** Network requests a breakpoint holds (docs/network.md): approve once / for the phase / for the project, or deny. */
function HeldRequests({
  jobId,
  phaseId,
  holds,
  act,
}: {
  jobId: string;
  phaseId: string;
  holds: EgressHoldView[];
  act: (what: () => Promise<unknown>) => Promise<void>;
}) {
  const [reason, setReason] = useState("");
  if (holds.length === 0) return null;
  const decide = (holdId: string, decision: EgressHoldDecision) =>
    act(() => client.resolveEgressHold({ jobId, phaseId, holdId, decision, reason: decision === EgressHoldDecision.DENY ? reason : "" }));
  return (
    <div class="held" data-testid="held-requests">
      <h2>Held network requests</h2>
      {holds.map((h) => (
        <div class="held-call" data-testid="held-request" data-hold-id={h.holdId} key={h.holdId}>
          <div class="held-head">
            <strong>{visible(h.destination)}</strong>
            <span class="muted">
              {visible(`${h.method} ${h.path}`.trim())} · breakpoint {visible(h.breakpointId)}
              {h.sinceMs !== undefined && ` · since ${clock(h.sinceMs)}`}
            </span>
          </div>
          <input value={reason} placeholder="Why, if denied (the tool reads it)" onInput={(e) => setReason(e.currentTarget.value)} data-testid="egress-reason" />
          <div class="buttons">
            <button class="primary" data-testid="egress-approve" onClick={() => decide(h.holdId, EgressHoldDecision.APPROVE_ONCE)}>
              Approve once
            </button>
            <button data-testid="egress-approve-phase" onClick={() => decide(h.holdId, EgressHoldDecision.APPROVE_PHASE)}>
              For this phase
            </button>
            <button data-testid="egress-approve-project" onClick={() => decide(h.holdId, EgressHoldDecision.APPROVE_PROJECT)}>
              For the project
            </button>
            <button class="danger" data-testid="egress-deny" onClick={() => decide(h.holdId, EgressHoldDecision.DENY)}>
              Deny
            </button>
          </div>
        </div>
      ))}
    </div>
  );
}

function HeldCalls({
  jobId,
  phaseId,
  pending,
  act,
}: {
  jobId: string;
  phaseId: string;
  pending: PendingToolCall[];
  act: (what: () => Promise<unknown>) => Promise<void>;
}) {
  if (pending.length === 0) return null;
  return (
    <div class="held" data-testid="held-calls">
      <h2>Held tool calls</h2>
      {pending.map((p) => (
        <HeldCall key={p.call?.toolUseId} jobId={jobId} phaseId={phaseId} pending={p} act={act} />
      ))}
    </div>
  );
}

function HeldCall({
  jobId,
  phaseId,
  pending,
  act,
}: {
  jobId: string;
  phaseId: string;
  pending: PendingToolCall;
  act: (what: () => Promise<unknown>) => Promise<void>;
}) {
  const call = pending.call!;
  const [mode, setMode] = useState<"none" | "deny" | "edit">("none");
  const [message, setMessage] = useState("");
  const [input, setInput] = useState(() => pretty(call.inputJson));
  const base = { jobId, phaseId, toolUseId: call.toolUseId };
  return (
    <div class="held-call" data-testid="held-call" data-tool={call.name} data-tool-use-id={call.toolUseId}>
      <div class="held-head">
        <strong>{visible(call.name)}</strong>
        <span class="muted">
          {visible(pending.holdReason)}
          {pending.breakpointId && !pending.holdReason.includes(pending.breakpointId) && ` · breakpoint ${pending.breakpointId}`}
          {pending.holdTime && ` · since ${clock(ms(pending.holdTime)!)}`}
        </span>
      </div>
      {mode === "edit" ? (
        <textarea class="code" rows={6} value={input} onInput={(e) => setInput(e.currentTarget.value)} data-testid="edit-input" />
      ) : (
        <pre class="code">{pretty(call.inputJson)}</pre>
      )}
      {mode === "deny" && <input value={message} placeholder="What the model is told (optional)" onInput={(e) => setMessage(e.currentTarget.value)} data-testid="deny-message" />}
      <div class="buttons">
        {mode === "none" && (
          <>
            <button class="primary" data-testid="approve" onClick={() => act(() => client.resolveToolCall({ ...base, decision: { case: "approve", value: {} } }))}>
              Approve
            </button>
            <button onClick={() => setMode("deny")}>Deny…</button>
            <button onClick={() => setMode("edit")}>Edit…</button>
          </>
        )}
        {mode === "deny" && (
          <button class="danger" data-testid="deny" onClick={() => act(() => client.resolveToolCall({ ...base, decision: { case: "deny", value: { message } } }))}>
            Deny
          </button>
        )}
        {mode === "edit" && (
          <button class="primary" data-testid="run-edited" onClick={() => act(() => client.resolveToolCall({ ...base, decision: { case: "edit", value: { inputJson: compact(input) } } }))}>
            Run edited
          </button>
        )}
        {mode !== "none" && <button onClick={() => setMode("none")}>Back</button>}
      </div>
    </div>
  );
}

// A call's input as the person deciding it sees it: indented, and what a bidi algorithm would
// obey written as JSON escapes (the same value: an edit starts from it; visible.ts).
function pretty(json: string): string {
  try {
    return escapedJson(JSON.stringify(JSON.parse(json), null, 2));
  } catch {
    return visible(json);
  }
}

function compact(json: string): string {
  try {
    return JSON.stringify(JSON.parse(json));
  } catch {
    return json; // the server answers INVALID_ARGUMENT with the field, shown in the banner
  }
}

function Timeline({ view, now }: { view: View; now: number }) {
  const rows = timelineRows(view);
  const origin = view.firstMs ?? now;
  const end = (c: CallView) => (c.endMs ?? (view.result ? (view.lastMs ?? now) : now)) - origin;
  const config = useMemo<ChartConfiguration>(
    () => ({
      type: "bar",
      data: {
        labels: rows.map((r) => `${"  ".repeat(r.depth)}${r.depth ? "↳ " : ""}${callLabel(r.call)}`),
        datasets: [
          {
            label: "tool calls",
            data: rows.map((r) => [(r.call.startMs - origin) / 1000, Math.max(end(r.call), r.call.startMs - origin + 30) / 1000]) as unknown as number[],
            backgroundColor: rows.map((r) => COLORS[r.call.status]),
            borderSkipped: false,
            barPercentage: 0.8,
            categoryPercentage: 0.9,
          },
        ],
      },
      options: {
        indexAxis: "y",
        plugins: {
          legend: { display: false },
          tooltip: {
            callbacks: {
              label: (item) => {
                const call = rows[item.dataIndex].call;
                const took = (end(call) - (call.startMs - origin)) / 1000;
                return `${call.status} · ${took.toFixed(2)} s · ${visible(call.input.slice(0, 80))}`;
              },
            },
          },
        },
        scales: { x: { type: "linear", min: 0, title: { display: true, text: "seconds since the first event" } }, y: { ticks: { autoSkip: false } } },
      },
    }),
    [view.calls, view.callOrder, view.result, Math.floor(now / 1000)],
  );
  if (rows.length === 0) return <p class="empty">No tool calls yet.</p>;
  return (
    <>
      <ChartCanvas config={config} testid="timeline" height={Math.min(600, 50 + rows.length * 26)} label="tool call timeline" />
      <div class="legend">
        {(["running", "held", "succeeded", "failed", "denied", "unfinished"] as const).map((s) => (
          <span>
            <i style={{ background: COLORS[s] }} /> {s}
          </span>
        ))}
      </div>
    </>
  );
}

function CostOverTime({ view }: { view: View }) {
  const origin = view.firstMs ?? 0;
  const config = useMemo<ChartConfiguration>(
    () => ({
      type: "line",
      data: {
        datasets: [
          {
            label: "computed",
            data: view.costSeries.map((p) => ({ x: (p.timeMs - origin) / 1000, y: p.computedUsd })),
            borderColor: COLORS.computed,
            backgroundColor: COLORS.computed,
            stepped: true,
          },
          {
            label: "CLI-reported",
            data: view.costSeries.filter((p) => p.reportedUsd !== null).map((p) => ({ x: (p.timeMs - origin) / 1000, y: p.reportedUsd! })),
            borderColor: COLORS.reported,
            backgroundColor: COLORS.reported,
            stepped: true,
          },
        ],
      },
      options: {
        scales: {
          x: { type: "linear", min: 0, title: { display: true, text: "seconds" } },
          y: { beginAtZero: true, ticks: { callback: (v) => money(Number(v)) } },
        },
      },
    }),
    [view.costSeries],
  );
  if (view.costSeries.length === 0) return <p class="empty">No cost yet.</p>;
  return <ChartCanvas config={config} testid="cost-chart" height={220} label="cost over time" />;
}

function CostByModel({ view }: { view: View }) {
  const models = view.cost?.models ?? [];
  const config = useMemo<ChartConfiguration>(
    () => ({
      type: "bar",
      data: {
        labels: models.map((m) => m.model),
        datasets: [
          { label: "CLI-reported", data: models.map((m) => m.reportedUsd ?? 0), backgroundColor: COLORS.reported },
          { label: "computed", data: models.map((m) => m.computedUsd), backgroundColor: COLORS.computed },
        ],
      },
      options: { scales: { y: { beginAtZero: true, ticks: { callback: (v) => money(Number(v)) } } } },
    }),
    [view.cost],
  );
  if (models.length === 0) return <p class="empty">No cost yet.</p>;
  return (
    <>
      <ChartCanvas config={config} testid="model-chart" height={220} label="cost by model" />
      {view.cost?.unpricedModels.length ? <p class="muted">Not in the price table: {view.cost.unpricedModels.join(", ")}</p> : null}
    </>
  );
}

function ToolStatsTable({ stats }: { stats: ToolStats[] }) {
  if (stats.length === 0) return <p class="empty">No finished tool calls yet.</p>;
  const s = (d: Parameters<typeof durationMs>[0]) => {
    const v = durationMs(d);
    return v === undefined ? "–" : `${(v / 1000).toFixed(2)} s`;
  };
  return (
    <table class="grid compact" data-testid="tool-stats">
      <thead>
        <tr>
          <th>Tool</th>
          <th class="num">Calls</th>
          <th class="num" title="failed">Fail</th>
          <th class="num" title="never finished">Open</th>
          <th class="num">Mean</th>
          <th class="num">p95</th>
          <th class="num">Total</th>
        </tr>
      </thead>
      <tbody>
        {stats.map((t) => (
          <tr>
            <td>{visible(t.name)}</td>
            <td class="num">{String(t.count)}</td>
            <td class="num">{String(t.failures)}</td>
            <td class="num">{String(t.unfinished)}</td>
            <td class="num">{s(t.meanDuration)}</td>
            <td class="num">{s(t.p95Duration)}</td>
            <td class="num">{s(t.totalDuration)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function EventLog({ view }: { view: View }) {
  const box = useRef<HTMLDivElement>(null);
  const stick = useRef(true);
  useEffect(() => {
    if (box.current && stick.current) box.current.scrollTop = box.current.scrollHeight;
  }, [view.log]);
  return (
    <div
      class="log"
      ref={box}
      data-testid="event-log"
      onScroll={(e) => {
        const el = e.currentTarget;
        stick.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
      }}
    >
      {view.log.map((entry) => (
        <div class={`line ${entry.tone} ${isRewound(view, entry.seq) ? "rewound" : ""}`} data-seq={entry.seq}>
          <span class="seq">#{entry.seq}</span>
          <span class="time">{clock(entry.timeMs)}</span>
          <span class="kind">{entry.kind}</span>
          <span class="text">{entry.text}</span>
        </div>
      ))}
    </div>
  );
}

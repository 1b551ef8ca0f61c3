/**
 * Fork and rewind on the page (docs/fork-and-rewind.md): a phase's checkpoints with "fork from here"
 * on each tool call (and "rewind here" while it is paused or holds a call), where a fork came from,
 * and a side-by-side view of two phases' events from the fork point on.
 */
import { useEffect, useState } from "preact/hooks";
import { client, describeError } from "../api.js";
import { CheckpointKind, watchPhase, type Checkpoint, type ForkOrigin, type Phase, type StreamEvent } from "../proto.js";
import { initialView, isRewound, reduce, type PhaseView as View } from "../reducer.js";
import { clock, href } from "../util.js";
import { Problem } from "./common.js";

/** The tool-call checkpoints of a phase, each a point to fork from (or rewind to, when it can). */
export function Checkpoints({
  jobId,
  phaseId,
  checkpoints,
  canRewind,
  act,
}: {
  jobId: string;
  phaseId: string;
  checkpoints: Checkpoint[];
  canRewind: boolean;
  act: (what: () => Promise<unknown>) => Promise<void>;
}) {
  const calls = checkpoints.filter((c) => c.kind === CheckpointKind.TOOL_CALL);
  if (calls.length === 0) return <p class="empty">No checkpoints yet (one follows each tool call).</p>;
  const fork = (c: Checkpoint) =>
    act(async () => {
      const r = await client.forkPhase({ jobId, phaseId, point: { at: { case: "toolUseId", value: c.toolUseId } } });
      location.hash = href("jobs", jobId, "phases", r.phase?.phaseId ?? "");
    });
  const rewind = (c: Checkpoint) => act(() => client.rewindPhase({ jobId, phaseId, point: { at: { case: "toolUseId", value: c.toolUseId } } }));
  return (
    <table class="grid compact" data-testid="checkpoints">
      <thead>
        <tr>
          <th class="num">#</th>
          <th class="num">Turn</th>
          <th>Tool call</th>
          <th>Files</th>
          <th />
        </tr>
      </thead>
      <tbody>
        {calls.map((c) => (
          <tr class={c.rewound ? "rewound" : ""} data-tool-use-id={c.toolUseId}>
            <td class="num">{c.number}</td>
            <td class="num">{c.turn}</td>
            <td>
              {c.toolName} <span class="muted">{c.toolUseId}</span>
            </td>
            <td class="muted" title={c.workspace?.reason}>
              {c.workspace?.commit ? `commit ${c.workspace.commit.slice(0, 10)}` : c.workspace?.tree ? `tree ${c.workspace.tree.slice(0, 10)}` : "not kept"}
            </td>
            <td>
              {c.rewound ? (
                <span class="muted">rewound</span>
              ) : (
                <>
                  <button onClick={() => fork(c)} data-testid="fork-from-here" title="start a new phase from after this call">
                    Fork from here
                  </button>
                  {canRewind && (
                    <button onClick={() => rewind(c)} title="take this phase back to after this call, in place">
                      Rewind here
                    </button>
                  )}
                </>
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Where a forked phase came from, with the side-by-side comparison. */
export function ForkedFrom({ jobId, phaseId, origin }: { jobId: string; phaseId: string; origin: ForkOrigin | undefined }) {
  if (!origin?.phaseId) return null;
  return (
    <div class="forked-from" data-testid="forked-from">
      Forked from <a href={href("jobs", jobId, "phases", origin.phaseId)}>{origin.phaseId}</a> at checkpoint {origin.checkpoint}
      {origin.toolUseId && <span class="muted"> (after {origin.toolUseId}, turn {origin.turn})</span>}
      {origin.changes.length > 0 && <span class="muted"> · {origin.changes.join(" · ")}</span>} ·{" "}
      <a href={href("jobs", jobId, "compare", origin.phaseId, phaseId)} data-testid="compare-link">
        compare side by side
      </a>
    </div>
  );
}

/** A job's phases as a small tree: each fork under the phase it came from (depth for indentation). */
export function lineage(phases: Phase[]): { phase: Phase; depth: number }[] {
  const ids = new Set(phases.map((p) => p.phaseId));
  const children = new Map<string, Phase[]>();
  const roots: Phase[] = [];
  for (const p of phases) {
    const parent = p.forkedFrom?.phaseId ?? "";
    if (parent && ids.has(parent) && parent !== p.phaseId) children.set(parent, [...(children.get(parent) ?? []), p]);
    else roots.push(p);
  }
  const out: { phase: Phase; depth: number }[] = [];
  const walk = (p: Phase, depth: number) => {
    out.push({ phase: p, depth });
    for (const c of children.get(p.phaseId) ?? []) walk(c, depth + 1);
  };
  roots.forEach((r) => walk(r, 0));
  return out.length === phases.length ? out : phases.map((phase) => ({ phase, depth: 0 }));
}

const COMPARE_LIMIT = 3000;

/** The events of a phase after `after`, folded into a view (bounded: the store has them all). */
function useEventsAfter(jobId: string, phaseId: string, after: bigint | undefined): [View, string | undefined] {
  const [view, setView] = useState<View>(initialView());
  const [error, setError] = useState<string>();
  useEffect(() => {
    if (after === undefined) return;
    const stream = watchPhase(client, jobId, phaseId, after);
    let stopped = false;
    (async () => {
      let v = initialView();
      let batch: StreamEvent[] = [];
      try {
        for await (const event of stream) {
          if (stopped) return;
          batch.push(event);
          if (batch.length >= 100) {
            v = reduce(v, { type: "events", events: batch });
            batch = [];
            setView(v);
          }
          if (v.eventCount + batch.length >= COMPARE_LIMIT) break;
        }
        v = reduce(v, { type: "events", events: batch });
        if (stream.result) v = reduce(v, { type: "result", result: stream.result });
        setView(v);
      } catch (e) {
        if (!stopped) setError(describeError(e));
      }
    })();
    return () => {
      stopped = true;
      stream.cancel();
    };
  }, [jobId, phaseId, after]);
  return [view, error];
}

/** Two phases side by side from the fork point on: the one forked (after the checkpoint) and the fork. */
export function CompareView({ jobId, left, right }: { jobId: string; left: string; right: string }) {
  const [point, setPoint] = useState<{ checkpoint: Checkpoint | undefined; origin: ForkOrigin | undefined }>();
  const [error, setError] = useState<string>();
  useEffect(() => {
    (async () => {
      try {
        const [l, r] = await Promise.all([
          client.inspectPhase({ jobId, phaseId: left }),
          client.inspectPhase({ jobId, phaseId: right }),
        ]);
        const origin = r.inspection?.phase?.forkedFrom;
        const number = origin?.phaseId === left ? origin.checkpoint : undefined;
        setPoint({ checkpoint: l.inspection?.checkpoints.find((c) => c.number === number), origin });
      } catch (e) {
        setError(describeError(e));
      }
    })();
  }, [jobId, left, right]);
  const after = point === undefined ? undefined : (point.checkpoint?.sequence ?? 0n);
  const [leftView, leftError] = useEventsAfter(jobId, left, after);
  const [rightView, rightError] = useEventsAfter(jobId, right, point === undefined ? undefined : 0n);
  return (
    <section class="compare">
      <nav class="crumbs">
        <a href="#/">Jobs</a> / <a href={href("jobs", jobId)}>{jobId}</a> / <span>compare</span>
      </nav>
      <h1>
        {left} ⇄ {right}
      </h1>
      <p class="muted" data-testid="fork-point">
        {point?.checkpoint
          ? `from checkpoint ${point.checkpoint.number} of ${left} (after ${point.checkpoint.toolName} ${point.checkpoint.toolUseId}, event #${point.checkpoint.sequence}) on`
          : point
            ? `${right} is not a fork of ${left}: both from their start`
            : "…"}
        {point?.origin?.changes.length ? ` · the fork changed: ${point.origin.changes.join(" · ")}` : ""}
      </p>
      <Problem error={error ?? leftError ?? rightError} />
      <div class="side-by-side">
        <EventColumn title={`${left} (after the point)`} view={leftView} testid="compare-left" />
        <EventColumn title={`${right} (the fork)`} view={rightView} testid="compare-right" />
      </div>
    </section>
  );
}

function EventColumn({ title, view, testid }: { title: string; view: View; testid: string }) {
  return (
    <div class="panel">
      <h2>
        {title} <span class="muted">({view.eventCount} events)</span>
      </h2>
      <div class="log" data-testid={testid}>
        {view.log.map((entry) => (
          <div class={`line ${entry.tone} ${isRewound(view, entry.seq) ? "rewound" : ""}`} data-seq={entry.seq}>
            <span class="seq">#{entry.seq}</span>
            <span class="time">{clock(entry.timeMs)}</span>
            <span class="kind">{entry.kind}</span>
            <span class="text">{entry.text}</span>
          </div>
        ))}
      </div>
    </div>
  );
}

// The phase view's event reducer (src/reducer.ts), run by node's test runner (scripts/build-web).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  ControlEventKind,
  GatewayEventKind,
  PhaseResultSchema,
  PhaseStatus,
  StreamEventSchema,
  type StreamEvent,
} from "../src/proto.js";
import {
  LOG_LIMIT,
  callLabel,
  currentTool,
  elapsedMs,
  initialView,
  isRewound,
  reduce,
  timelineRows,
  type PhaseView,
} from "../src/reducer.js";

const T0 = Date.UTC(2025, 0, 1, 12, 0, 0);

function ev(seq: number, payload: MessageInitShape<typeof StreamEventSchema>["payload"], extra: { parentToolUseId?: string } = {}): StreamEvent {
  return create(StreamEventSchema, {
    sequence: BigInt(seq),
    receiveTime: timestampFromMs(T0 + seq * 1000),
    jobId: "j",
    phaseId: "p",
    payload,
    ...extra,
  });
}

const started = (seq: number, id: string, name = "Bash", parent = "") =>
  ev(seq, { case: "toolCallStarted", value: { toolUseId: id, name, inputJson: '{"command":"touch x"}' } }, { parentToolUseId: parent });
const finished = (seq: number, id: string, isError = false) =>
  ev(seq, { case: "toolCallFinished", value: { toolUseId: id, name: "Bash", isError, duration: durationFromMs(500) } });
const control = (seq: number, kind: ControlEventKind, toolUseId = "", inputJson = "") =>
  ev(seq, { case: "control", value: { kind, toolUseId, inputJson } });
const cost = (seq: number, computedUsd: number, reportedUsd?: number) =>
  ev(seq, { case: "costUpdate", value: { cost: { computedUsd, reportedUsd, models: [{ model: "claude-x", computedUsd, reportedUsd }] } } });
const status = (seq: number, fromStatus: PhaseStatus, toStatus: PhaseStatus) =>
  ev(seq, { case: "statusChanged", value: { fromStatus, toStatus, reason: "because" } });

function fold(...batches: StreamEvent[][]): PhaseView {
  return batches.reduce((view, events) => reduce(view, { type: "events", events }), initialView());
}

test("a reconnect that replays events already applied neither duplicates nor loses any", () => {
  const first = [status(1, PhaseStatus.PENDING, PhaseStatus.RUNNING), started(2, "t1"), cost(3, 0.01)];
  // The connection drops after #3; the page resumes from its cursor but the server (or a proxy)
  // sends #2..#3 again before the new #4..#5.
  const replay = [started(2, "t1"), cost(3, 0.01), finished(4, "t1"), cost(5, 0.02, 0.021)];
  const view = fold(first, replay);
  assert.equal(view.lastSequence, 5);
  assert.equal(view.eventCount, 5);
  assert.equal(view.duplicates, 2);
  assert.equal(view.missing, 0);
  assert.deepEqual(view.log.map((l) => l.seq), [1, 2, 3, 4, 5]);
  assert.equal(view.callOrder.length, 1);
  assert.equal(view.costSeries.length, 2);
  assert.equal(view.calls.t1.status, "succeeded");
});

test("duplicates inside one batch are applied once, and a gap is counted", () => {
  const view = fold([status(1, PhaseStatus.PENDING, PhaseStatus.RUNNING), started(2, "a"), started(2, "a"), cost(5, 0.1)]);
  assert.equal(view.eventCount, 3);
  assert.equal(view.duplicates, 1);
  assert.equal(view.missing, 2); // #3 and #4 never arrived
  assert.equal(view.lastSequence, 5);
});

test("a batch of only old events returns the same state object (no re-render)", () => {
  const view = fold([started(1, "a")]);
  const again = reduce(view, { type: "events", events: [] });
  assert.equal(again, view);
});

test("a breakpoint holds a call, approval runs it, and its result finishes it", () => {
  let view = fold([status(1, PhaseStatus.PENDING, PhaseStatus.RUNNING), started(2, "t1")]);
  assert.equal(currentTool(view)?.id, "t1");
  view = fold([status(1, PhaseStatus.PENDING, PhaseStatus.RUNNING), started(2, "t1"), control(3, ControlEventKind.BREAKPOINT_HIT, "t1"), status(4, PhaseStatus.RUNNING, PhaseStatus.AWAITING_APPROVAL)]);
  assert.equal(view.calls.t1.status, "held");
  assert.equal(view.status, PhaseStatus.AWAITING_APPROVAL);
  const version = view.controlVersion;
  view = reduce(view, { type: "events", events: [control(5, ControlEventKind.TOOL_APPROVED, "t1")] });
  assert.equal(view.calls.t1.status, "running");
  assert.ok(view.controlVersion > version, "a control event asks the page to re-read held calls");
  view = reduce(view, { type: "events", events: [finished(6, "t1")] });
  assert.equal(view.calls.t1.status, "succeeded");
  assert.equal(view.calls.t1.endMs! - view.calls.t1.startMs, 4000);
  assert.equal(currentTool(view), undefined);
});

test("a denied call stays denied when its error result arrives; a failing one is failed", () => {
  const view = fold([
    started(1, "d"),
    control(2, ControlEventKind.BREAKPOINT_HIT, "d"),
    control(3, ControlEventKind.TOOL_DENIED, "d"),
    finished(4, "d", true),
    started(5, "f"),
    finished(6, "f", true),
  ]);
  assert.equal(view.calls.d.status, "denied");
  assert.equal(view.calls.f.status, "failed");
});

test("an edited call shows the input it ran with", () => {
  const view = fold([
    started(1, "e"),
    control(2, ControlEventKind.BREAKPOINT_HIT, "e"),
    control(3, ControlEventKind.TOOL_EDITED, "e", '{"command":"touch edited.txt"}'),
  ]);
  assert.equal(view.calls.e.status, "running");
  assert.equal(callLabel(view.calls.e), "Bash touch edited.txt");
});

test("resume releases calls held by a pause but not those held by a breakpoint", () => {
  const view = fold([
    started(1, "p"),
    control(2, ControlEventKind.PAUSED, "p"),
    started(3, "b"),
    control(4, ControlEventKind.BREAKPOINT_HIT, "b"),
    control(5, ControlEventKind.RESUMED),
  ]);
  assert.equal(view.calls.p.status, "running");
  assert.equal(view.calls.b.status, "held");
});

test("subagent calls are nested right under the call that spawned them", () => {
  const view = fold([
    started(1, "agent", "Task"),
    started(2, "main2", "Read"),
    started(3, "sub1", "Bash", "agent"),
    started(4, "sub2", "Grep", "agent"),
    started(5, "subsub", "Bash", "sub1"),
  ]);
  assert.deepEqual(
    timelineRows(view).map((r) => [r.call.id, r.depth]),
    [["agent", 0], ["sub1", 1], ["subsub", 2], ["sub2", 1], ["main2", 0]],
  );
  // The current tool prefers the main thread's newest open call.
  assert.equal(currentTool(view)?.id, "main2");
});

test("cost series keeps computed and CLI-reported figures; the latest cost wins", () => {
  const view = fold([cost(1, 0.001), cost(2, 0.002, 0.0025)]);
  assert.deepEqual(view.costSeries.map((p) => [p.computedUsd, p.reportedUsd]), [[0.001, null], [0.002, 0.0025]]);
  assert.equal(view.cost?.models[0].model, "claude-x");
});

test("the result ends the phase: final status, open calls unfinished, elapsed frozen", () => {
  let view = fold([status(1, PhaseStatus.PENDING, PhaseStatus.RUNNING), started(2, "open")]);
  assert.equal(elapsedMs(view, T0 + 10_000), 9_000);
  const result = create(PhaseResultSchema, {
    status: PhaseStatus.CANCELLED,
    reason: "cancelled from the dashboard",
    startTime: timestampFromMs(T0),
    endTime: timestampFromMs(T0 + 3_000),
  });
  view = reduce(view, { type: "result", result });
  assert.equal(view.status, PhaseStatus.CANCELLED);
  assert.equal(view.statusReason, "cancelled from the dashboard");
  assert.equal(view.calls.open.status, "unfinished");
  assert.equal(elapsedMs(view, T0 + 99_000), 3_000);
  assert.equal(currentTool(view), undefined);
});

test("the log keeps the newest entries only", () => {
  const events = Array.from({ length: LOG_LIMIT + 20 }, (_, i) => cost(i + 1, i / 1000));
  const view = fold(events.slice(0, 300), events.slice(300));
  assert.equal(view.log.length, LOG_LIMIT);
  assert.equal(view.log.at(-1)?.seq, LOG_LIMIT + 20);
  assert.equal(view.eventCount, LOG_LIMIT + 20);
});

test("a gateway event (429, a refused destination) is a line of the log, in the error tone", () => {
  const view = fold([
    ev(1, { case: "gateway", value: { kind: GatewayEventKind.RATE_LIMITED, httpStatus: 429, model: "claude-x", message: "rate_limit_error: slow down" } }),
    ev(2, { case: "gateway", value: { kind: GatewayEventKind.EGRESS_REFUSED, httpStatus: 403, destination: "evil.example:443", message: "not in the allowlist" } }),
  ]);
  assert.deepEqual(view.log.map((l) => [l.kind, l.tone]), [["gateway", "error"], ["gateway", "error"]]);
  assert.match(view.log[0].text, /^rate limited claude-x \(HTTP 429\) rate_limit_error: slow down$/);
  assert.match(view.log[1].text, /^egress refused evil\.example:443 \(HTTP 403\)/);
});

test("a connection the egress proxy let through is a muted line: destination, request, bytes", () => {
  const view = fold([
    ev(1, { case: "gateway", value: { kind: GatewayEventKind.EGRESS_CONNECTION, destination: "pypi.org:443", method: "GET",
      path: "/simple/x/", bytesSent: 210n, bytesReceived: 4096n } }),
  ]);
  assert.deepEqual(view.log.map((l) => [l.kind, l.tone]), [["egress", "muted"]]);
  assert.match(view.log[0].text, /^pypi\.org:443 GET \/simple\/x\/ ↑210 B ↓4096 B$/);
});

test("a REWOUND control event marks the superseded events, which stay in the log", () => {
  const events = [
    started(1, "a"),
    finished(2, "a"),
    started(3, "b"),
    finished(4, "b"),
    ev(5, { case: "control", value: { kind: ControlEventKind.REWOUND, checkpoint: 1, rewoundAfterSequence: 2n, rewoundToSequence: 4n } }),
  ];
  const view = reduce(initialView(), { type: "events", events });
  assert.deepEqual(view.rewound, [{ after: 2, to: 4 }]);
  assert.deepEqual(
    view.log.map((e) => [e.seq, isRewound(view, e.seq)]),
    [
      [1, false],
      [2, false],
      [3, true],
      [4, true],
      [5, false],
    ],
  );
});

test("what a phase wrote reaches the log and the call labels as escapes, never as bidi or terminal controls", () => {
  const hostile = "\u202eexe.txt\u202c \u001b]0;title\u0007 \u2066x\u2069";
  const view = fold([
    ev(1, { case: "assistantText", value: { text: `look: ${hostile}` } }),
    ev(2, { case: "toolCallStarted", value: { toolUseId: "t1", name: `Bash${hostile}`, inputJson: JSON.stringify({ command: hostile }) } }),
  ]);
  const texts = view.log.map((e) => e.text).join("\n");
  assert.ok(!/[\u202e\u202c\u2066\u2069\u001b\u0007]/.test(texts), texts);
  assert.ok(texts.includes("\\u202eexe.txt\\u202c") && texts.includes("\\x1b]0;title\\x07"), texts);
  const label = callLabel(view.calls["t1"]);
  assert.ok(!/[\u202e\u2066]/.test(label) && label.startsWith("Bash\\u202e"), label);
});

test("a control event a caller caused names who: tool approved by alice", () => {
  const view = fold([
    ev(1, { case: "control", value: { kind: ControlEventKind.TOOL_APPROVED, toolName: "Bash", actor: "alice@team-a" } }),
    ev(2, { case: "control", value: { kind: ControlEventKind.BREAKPOINT_HIT, toolName: "Bash" } }),
  ]);
  assert.deepEqual(view.log.map((l) => l.text), ["tool approved by alice@team-a: Bash", "breakpoint hit: Bash"]);
});

test("a held network request and its decision are egress lines that say who decided", () => {
  const view = fold([
    ev(1, { case: "gateway", value: { kind: GatewayEventKind.EGRESS_HELD, destination: "pypi.org:443", method: "CONNECT", holdId: "eg-1" } }),
    ev(2, { case: "gateway", value: { kind: GatewayEventKind.EGRESS_DENIED, destination: "pypi.org:443", holdId: "eg-1", actor: "alice@team-a", message: "no installs" } }),
  ]);
  assert.deepEqual(view.log.map((l) => [l.kind, l.text, l.tone]), [
    ["egress", "held: pypi.org:443 CONNECT [eg-1]", "control"],
    ["egress", "denied by alice@team-a: pypi.org:443 [eg-1] no installs", "error"],
  ]);
});

test("a held network request is pending until it is decided", () => {
  let view = fold([ev(1, { case: "gateway", value: { kind: GatewayEventKind.EGRESS_HELD, destination: "pypi.org:443", method: "CONNECT", holdId: "eg-1", breakpointId: "b" } })]);
  assert.deepEqual(Object.keys(view.egressHolds), ["eg-1"]);
  assert.equal(view.egressHolds["eg-1"]!.destination, "pypi.org:443");
  view = reduce(view, { type: "events", events: [ev(2, { case: "gateway", value: { kind: GatewayEventKind.EGRESS_APPROVED, holdId: "eg-1" } })] });
  assert.deepEqual(view.egressHolds, {});
});

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Code } from "@connectrpc/connect";
import {
  createRunnerClient,
  enumName,
  ERROR_DOMAIN,
  errorInfo,
  ErrorReason,
  eventKind,
  PhaseStatus,
  PhaseStatusSchema,
  RunnerError,
  runPhase,
  watchPhase,
  type PhaseMove,
  type RunnerClient,
} from "../src/index.js";
import { startFakeServer, type FakeServer } from "./fake_server.js";

describe("against a fake RunnerService over gRPC", () => {
  let server: FakeServer;
  let client: RunnerClient;

  before(async () => {
    server = await startFakeServer();
    client = createRunnerClient({ address: server.address, token: "s3cret" });
  });
  after(async () => {
    await server.close();
  });

  it("runPhase yields every event in order, then exposes the result", async () => {
    const phase = runPhase(client, { jobId: "job-1", prompt: "hi", workingDir: "/tmp" });
    const { events, result } = await phase.collect();
    assert.deepEqual(events.map((e) => e.sequence), [1n, 2n, 3n]);
    assert.equal(eventKind(events[0]!), "assistant_text");
    assert.equal(result.status, PhaseStatus.SUCCEEDED);
    assert.equal(enumName(PhaseStatusSchema, result.status), "PHASE_STATUS_SUCCEEDED");
    assert.equal(phase.result, result);
    assert.equal(server.authorization.at(-1), "Bearer s3cret");
  });

  it("a token function is asked before each call (short-lived tokens)", async () => {
    let issued = 0;
    const rotating = createRunnerClient({ address: server.address, token: async () => `t-${++issued}` });
    await runPhase(rotating, { jobId: "job-1", prompt: "hi", workingDir: "/tmp" }).collect();
    await runPhase(rotating, { jobId: "job-1", prompt: "hi", workingDir: "/tmp" }).collect();
    assert.deepEqual(server.authorization.slice(-2), ["Bearer t-1", "Bearer t-2"]);
  });

  it("watchPhase starts after the cursor", async () => {
    const { events, result } = await watchPhase(client, "job-1", "p1", 1n).collect();
    assert.deepEqual(events.map((e) => e.sequence), [2n, 3n]);
    assert.equal(result.status, PhaseStatus.CANCELLED);
  });

  it("cancel() ends the call on the server", async () => {
    const phase = runPhase(client, { jobId: "slow", prompt: "hi", workingDir: "/tmp" });
    for await (const event of phase) {
      assert.equal(event.sequence, 1n);
      phase.cancel();
    }
    await waitFor(() => server.cancelled.includes("slow"));
    assert.equal(phase.result, undefined);
  });

  it("breaking out of the loop cancels the call too", async () => {
    server.cancelled.length = 0;
    const phase = runPhase(client, { jobId: "slow", prompt: "hi", workingDir: "/tmp" });
    for await (const _ of phase) break;
    await waitFor(() => server.cancelled.includes("slow"));
  });

  it("follows a moved phase through WatchPhase: one gap-free stream, each event once", async () => {
    const seen: PhaseMove[] = [];
    const phase = runPhase(client, { jobId: "moving", phaseId: "p1", prompt: "hi", workingDir: "/tmp" }, {
      onMove: (move) => seen.push(move),
    });
    const { events, result } = await phase.collect();
    assert.deepEqual(events.map((e) => e.sequence), [1n, 2n, 3n, 4n]);
    assert.equal(result.status, PhaseStatus.SUCCEEDED);
    // The draining replica answered the first re-attach with another move; the second reached the adopter.
    assert.deepEqual(server.movingWatches, [2n, 2n]);
    assert.equal(seen.length, 1);
    assert.deepEqual(phase.moves, seen);
    assert.equal(seen[0]!.fromReplica, "replica-a");
    assert.equal(seen[0]!.afterSequence, 2n);
  });

  it("without reattach, a move ends the stream with PHASE_MOVED", async () => {
    const phase = runPhase(client, { jobId: "moving", phaseId: "p1", prompt: "hi", workingDir: "/tmp" }, { reattach: false });
    await assert.rejects(phase.collect(), (err: unknown) => {
      assert.ok(err instanceof RunnerError);
      assert.equal(err.code, Code.Unavailable);
      assert.ok(err.phaseMoved);
      assert.equal(err.retryDelayMs, 1000);
      return true;
    });
  });

  it("a re-attach cancelled by a stopping server is tried again, like an unreachable one", async () => {
    const phase = runPhase(client, { jobId: "moving-cancelled", phaseId: "p1", prompt: "hi", workingDir: "/tmp" });
    const { events, result } = await phase.collect();
    assert.deepEqual(events.map((e) => e.sequence), [1n, 2n, 3n]);
    assert.equal(result.status, PhaseStatus.SUCCEEDED);
  });

  it("a re-attach refused for good (not a move, not unavailable) ends the stream with that error", async () => {
    const phase = runPhase(client, { jobId: "moving-final", phaseId: "p1", prompt: "hi", workingDir: "/tmp" });
    await assert.rejects(phase.collect(), (err: unknown) => {
      assert.ok(err instanceof RunnerError);
      assert.equal(err.code, Code.NotFound);
      return true;
    });
    assert.equal(phase.moves.length, 1);
  });

  it("a stream that ends without a result is an Internal RunnerError", async () => {
    const phase = runPhase(client, { jobId: "truncated", prompt: "hi", workingDir: "/tmp" });
    await assert.rejects(phase.collect(), (err: unknown) => {
      assert.ok(err instanceof RunnerError);
      assert.equal(err.code, Code.Internal);
      return true;
    });
  });

  it("forkPhase sends the point, its decision and the overrides; the fork comes back with forkedFrom", async () => {
    const forked = await client.forkPhase({
      jobId: "job-f",
      phaseId: "orig",
      newPhaseId: "what-if",
      model: "claude-haiku",
      point: { at: { case: "toolUseId", value: "toolu_2" }, decision: { case: "deny", value: { message: "no" } } },
    });
    assert.equal(forked.phase?.phaseId, "what-if");
    assert.equal(forked.phase?.forkedFrom?.phaseId, "orig");
    assert.equal(forked.phase?.forkedFrom?.toolUseId, "toolu_2");
    assert.deepEqual(forked.phase?.forkedFrom?.changes, ["deny toolu_2: no", "model claude-haiku"]);
    assert.equal(forked.checkpoint?.number, 2);
  });

  it("rewindPhase answers the checkpoint and the REWOUND event's sequence, or an error with its ErrorInfo", async () => {
    const rewound = await client.rewindPhase({ jobId: "job-f", phaseId: "orig", point: { at: { case: "turn", value: 1 } } });
    assert.equal(rewound.checkpoint?.number, 1);
    assert.equal(rewound.sequence, 41n);
    await assert.rejects(
      client.rewindPhase({ jobId: "job-f", phaseId: "orig", point: { at: { case: "toolUseId", value: "toolu_1" } } }),
      (error: unknown) => errorInfo(error)?.reason === "PHASE_NOT_PAUSED",
    );
  });

  it("decodes ErrorInfo from grpc-status-details-bin", async () => {
    const err = await client.getJob({ jobId: "nope" }).then(
      () => assert.fail("expected an error"),
      (e: unknown) => RunnerError.from(e),
    );
    assert.equal(err.code, Code.NotFound);
    assert.equal(err.rawMessage, "job nope does not exist");
    assert.equal(err.reason, "JOB_NOT_FOUND");
    assert.equal(err.domain, ERROR_DOMAIN);
    assert.deepEqual(err.metadata, { job_id: "nope" });
    assert.equal(err.errorReason, ErrorReason.JOB_NOT_FOUND);
    assert.equal(err.message, "NotFound: job nope does not exist [JOB_NOT_FOUND]");

    const raw = await client.pausePhase({ jobId: "j", phaseId: "p" }).catch((e: unknown) => e);
    assert.equal(errorInfo(raw)?.reason, "NOT_IMPLEMENTED");
    assert.equal(RunnerError.from(raw).errorReason, ErrorReason.NOT_IMPLEMENTED);
  });

  it("errors without details, or with reasons from elsewhere, decode to undefined", () => {
    const plain = RunnerError.from(new Error("boom"));
    assert.equal(plain.info, undefined);
    assert.equal(plain.reason, undefined);
    assert.deepEqual(plain.metadata, {});
    assert.equal(plain.errorReason, undefined);
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

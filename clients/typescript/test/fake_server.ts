// A fake RunnerService on loopback (Connect's node adapter speaking gRPC over HTTP/2), so the
// helpers are tested through the real transport, trailers and all, without the Python server.
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import {
  ForkPhaseResponseSchema,
  PhaseResultSchema,
  PhaseStatus,
  RewindPhaseResponseSchema,
  RunnerService,
  StreamEventSchema,
  type StreamEvent,
} from "../src/index.js";

export interface FakeServer {
  address: string;
  /** Phases whose RunPhase call was cancelled by the client. */
  cancelled: string[];
  /** Authorization headers seen. */
  authorization: (string | null)[];
  /** `afterSequence` of each WatchPhase call for the job "moving" (the draining replica answers the first). */
  movingWatches: bigint[];
  close(): Promise<void>;
}

function event(sequence: number, jobId: string): StreamEvent {
  return create(StreamEventSchema, {
    sequence: BigInt(sequence),
    jobId,
    payload: { case: "assistantText", value: { text: `event ${sequence}` } },
  });
}

/** The end of a stream whose replica drained: UNAVAILABLE, ErrorInfo PHASE_MOVED, RetryInfo 1 s. */
function moved(jobId: string, afterSequence: bigint): ConnectError {
  return new ConnectError(`phase p1 of job ${jobId} moved to another replica`, Code.Unavailable, undefined, [
    {
      desc: ErrorInfoSchema,
      value: {
        reason: "PHASE_MOVED",
        domain: "runner.helix",
        metadata: { job_id: jobId, phase_id: "p1", after_sequence: String(afterSequence), from_replica: "replica-a" },
      },
    },
    { desc: RetryInfoSchema, value: { retryDelay: { seconds: 1n, nanos: 0 } } },
  ]);
}

export async function startFakeServer(): Promise<FakeServer> {
  const cancelled: string[] = [];
  const movingWatches: bigint[] = [];
  let cancelledWatches = 0;
  const authorization: (string | null)[] = [];
  const routes = (router: ConnectRouter) =>
    router.service(RunnerService, {
      async *runPhase(request, context) {
        authorization.push(context.requestHeader.get("authorization"));
        if (request.jobId === "slow") {
          yield { events: [event(1, "slow")] };
          await new Promise<void>((resolve) => context.signal.addEventListener("abort", () => resolve()));
          cancelled.push(request.jobId);
          return;
        }
        if (request.jobId === "moving" || request.jobId === "moving-final" || request.jobId === "moving-cancelled") {
          yield { events: [event(1, request.jobId), event(2, request.jobId)] };
          throw moved(request.jobId, 2n);
        }
        if (request.jobId === "truncated") {
          yield { events: [event(1, "truncated")] };
          return;
        }
        yield { events: [event(1, request.jobId), event(2, request.jobId)] };
        yield { events: [event(3, request.jobId)] };
        yield { events: [], result: create(PhaseResultSchema, { status: PhaseStatus.SUCCEEDED, lastSequence: 3n }) };
      },
      async *watchPhase(request) {
        if (request.jobId === "moving-cancelled") {
          cancelledWatches += 1;
          // The draining replica's server stopping under the first re-attach: gRPC says CANCELLED.
          if (cancelledWatches === 1) throw new ConnectError("CANCELLED", Code.Canceled);
          yield { events: [event(3, "moving-cancelled")] };
          yield { events: [], result: create(PhaseResultSchema, { status: PhaseStatus.SUCCEEDED, lastSequence: 3n }) };
          return;
        }
        if (request.jobId === "moving-final") {
          throw new ConnectError("phase p1 of job moving-final does not exist", Code.NotFound);
        }
        if (request.jobId === "moving") {
          movingWatches.push(request.afterSequence);
          if (movingWatches.length === 1) throw moved(request.jobId, request.afterSequence); // still the draining replica
          // The adopter: a batch that repeats the last event before the move, then the rest.
          yield { events: [event(2, "moving"), event(3, "moving")] };
          yield { events: [event(4, "moving")] };
          yield { events: [], result: create(PhaseResultSchema, { status: PhaseStatus.SUCCEEDED, lastSequence: 4n }) };
          return;
        }
        for (let seq = Number(request.afterSequence) + 1; seq <= 3; seq++) yield { events: [event(seq, request.jobId)] };
        yield { events: [], result: create(PhaseResultSchema, { status: PhaseStatus.CANCELLED, lastSequence: 3n }) };
      },
      async getJob(request) {
        throw new ConnectError(`job ${request.jobId} does not exist`, Code.NotFound, undefined, [
          { desc: ErrorInfoSchema, value: { reason: "JOB_NOT_FOUND", domain: "runner.helix", metadata: { job_id: request.jobId } } },
        ]);
      },
      async forkPhase(request) {
        // Echoes what arrived as the fork's origin, so a test sees the request went over whole.
        const point = request.point;
        const changes: string[] = [];
        if (point?.decision.case === "deny") changes.push(`deny ${point.at.value}: ${point.decision.value.message}`);
        if (point?.inject) changes.push(`inject ${point.inject}`);
        if (request.model) changes.push(`model ${request.model}`);
        return create(ForkPhaseResponseSchema, {
          phase: {
            jobId: request.jobId,
            phaseId: request.newPhaseId || "fork-1",
            status: PhaseStatus.RUNNING,
            forkedFrom: {
              jobId: request.jobId,
              phaseId: request.phaseId,
              checkpoint: 2,
              toolUseId: point?.at.case === "toolUseId" ? point.at.value : "",
              changes,
            },
          },
          checkpoint: { number: 2, toolUseId: point?.at.case === "toolUseId" ? point.at.value : "" },
        });
      },
      async rewindPhase(request) {
        if (request.point?.at.case !== "turn") {
          throw new ConnectError("the phase is RUNNING", Code.FailedPrecondition, undefined, [
            { desc: ErrorInfoSchema, value: { reason: "PHASE_NOT_PAUSED", domain: "runner.helix" } },
          ]);
        }
        return create(RewindPhaseResponseSchema, { checkpoint: { number: request.point.at.value }, sequence: 41n });
      },
      async pausePhase() {
        throw new ConnectError("not yet", Code.Unimplemented, undefined, [
          { desc: ErrorInfoSchema, value: { reason: "NOT_IMPLEMENTED", domain: "runner.helix" } },
        ]);
      },
    });
  const server = http2.createServer(connectNodeAdapter({ routes, grpc: true, connect: false, grpcWeb: false }));
  const sessions = new Set<http2.Http2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.on("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    cancelled,
    authorization,
    movingWatches,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Open HTTP/2 sessions keep the server alive; end them.
        for (const session of sessions) session.destroy();
      }),
  };
}


// A fake RunnerService on loopback (Connect's node adapter speaking gRPC over HTTP/2), so the
// helpers are tested through the real transport, trailers and all, without the Python server.
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import {
  PhaseResultSchema,
  PhaseStatus,
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
  close(): Promise<void>;
}

function event(sequence: number, jobId: string): StreamEvent {
  return create(StreamEventSchema, {
    sequence: BigInt(sequence),
    jobId,
    payload: { case: "assistantText", value: { text: `event ${sequence}` } },
  });
}

export async function startFakeServer(): Promise<FakeServer> {
  const cancelled: string[] = [];
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
        if (request.jobId === "truncated") {
          yield { events: [event(1, "truncated")] };
          return;
        }
        yield { events: [event(1, request.jobId), event(2, request.jobId)] };
        yield { events: [event(3, request.jobId)] };
        yield { events: [], result: create(PhaseResultSchema, { status: PhaseStatus.SUCCEEDED, lastSequence: 3n }) };
      },
      async *watchPhase(request) {
        for (let seq = Number(request.afterSequence) + 1; seq <= 3; seq++) yield { events: [event(seq, request.jobId)] };
        yield { events: [], result: create(PhaseResultSchema, { status: PhaseStatus.CANCELLED, lastSequence: 3n }) };
      },
      async getJob(request) {
        throw new ConnectError(`job ${request.jobId} does not exist`, Code.NotFound, undefined, [
          { desc: ErrorInfoSchema, value: { reason: "JOB_NOT_FOUND", domain: "runner.helix", metadata: { job_id: request.jobId } } },
        ]);
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
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Open HTTP/2 sessions keep the server alive; end them.
        for (const session of sessions) session.destroy();
      }),
  };
}


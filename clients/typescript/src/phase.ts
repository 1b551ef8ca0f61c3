import { create, type DescEnum, type MessageInitShape } from "@bufbuild/protobuf";
import type { StreamEvent } from "./gen/helix/runner/v1/events_pb.js";
import type { PhaseResult } from "./gen/helix/runner/v1/resources_pb.js";
import { RunPhaseRequestSchema, WatchPhaseRequestSchema } from "./gen/helix/runner/v1/runner_service_pb.js";
import type { RunnerClient } from "./client.js";
import { RunnerError } from "./errors.js";
import { Code } from "@connectrpc/connect";

type Batch = { events: StreamEvent[]; result?: PhaseResult };

/**
 * The events of one phase (`for await`), then its {@link PhaseStream.result}.
 *
 * Iteration yields every event in sequence order and ends when the result arrives. A failed
 * call throws a {@link RunnerError}; so does a stream that ends without a result (code
 * `Internal`). {@link PhaseStream.cancel} (or breaking out of the loop) cancels the call and
 * ends the iteration quietly;
 * cancelling RunPhase cancels the phase unless it was started with `ON_DISCONNECT_DETACH`.
 */
export class PhaseStream implements AsyncIterable<StreamEvent> {
  /** The final result, once iteration has reached it. */
  result: PhaseResult | undefined;
  private readonly controller: AbortController;
  private readonly batches: AsyncIterable<Batch>;
  private started = false;
  private cancelled = false;

  /** Wraps `open(signal)`, which starts the call. */
  constructor(open: (signal: AbortSignal) => AsyncIterable<Batch>) {
    this.controller = new AbortController();
    this.batches = open(this.controller.signal);
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<StreamEvent, void, undefined> {
    if (this.started) throw new Error("a PhaseStream can be iterated once");
    this.started = true;
    try {
      for await (const batch of this.batches) {
        yield* batch.events;
        if (batch.result) {
          this.result = batch.result;
          return;
        }
      }
    } catch (error) {
      if (this.cancelled) return; // cancel() ends the iteration quietly
      throw RunnerError.from(error);
    } finally {
      if (!this.result) this.controller.abort();
    }
    throw new RunnerError(Code.Internal, "the phase stream ended without a PhaseResult", undefined);
  }

  /** Reads to the end: every remaining event and the result. */
  async collect(): Promise<{ events: StreamEvent[]; result: PhaseResult }> {
    const events: StreamEvent[] = [];
    for await (const event of this) events.push(event);
    return { events, result: this.result! };
  }

  /** Cancels the call (no effect once it has finished); iteration then ends without an error. */
  cancel(): void {
    this.cancelled = true;
    this.controller.abort();
  }
}

/** Starts a phase and streams it: events, then the result. */
export function runPhase(
  client: RunnerClient,
  request: MessageInitShape<typeof RunPhaseRequestSchema>,
): PhaseStream {
  const message = create(RunPhaseRequestSchema, request);
  return new PhaseStream((signal) => client.runPhase(message, { signal }));
}

/** Attaches to a phase: events after `afterSequence` (recorded, then live), then the result. */
export function watchPhase(
  client: RunnerClient,
  jobId: string,
  phaseId: string,
  afterSequence: bigint = 0n,
): PhaseStream {
  const message = create(WatchPhaseRequestSchema, { jobId, phaseId, afterSequence });
  return new PhaseStream((signal) => client.watchPhase(message, { signal }));
}

/** The proto name of the payload field that is set (`"tool_call_started"`...), `""` if none. */
export function eventKind(event: StreamEvent): string {
  const name = event.payload.case;
  return name === undefined ? "" : name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** The proto name of an enum value (`"PHASE_STATUS_SUCCEEDED"`), or `"<number>"` for an unknown one. */
export function enumName(schema: DescEnum, value: number): string {
  return schema.value[value]?.name ?? String(value);
}

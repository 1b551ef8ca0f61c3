import { create, type DescEnum, type MessageInitShape } from "@bufbuild/protobuf";
import type { StreamEvent } from "./gen/helix/runner/v1/events_pb.js";
import type { PhaseResult } from "./gen/helix/runner/v1/resources_pb.js";
import { RunPhaseRequestSchema, WatchPhaseRequestSchema } from "./gen/helix/runner/v1/runner_service_pb.js";
import type { RunnerClient } from "./client.js";
import { RunnerError } from "./errors.js";
import { Code } from "@connectrpc/connect";

type Batch = { events: StreamEvent[]; result?: PhaseResult };

/** One hand-over a stream followed: the replica the phase left and the last sequence it had sent. */
export interface PhaseMove {
  jobId: string;
  phaseId: string;
  /** The replica that drained (`ErrorInfo.metadata.from_replica`). */
  fromReplica: string;
  /** The server's cursor: every event up to it was sent before the move. */
  afterSequence: bigint;
  /** The status message of the `PHASE_MOVED` end. */
  message: string;
}

/** How a stream follows a phase that moves to another replica (a drain). */
export interface FollowOptions {
  /**
   * Re-attach through `WatchPhase` when the serving replica hands the phase over
   * (`UNAVAILABLE` / `PHASE_MOVED`); default `true`. Off, the stream throws that error.
   */
  reattach?: boolean;
  /** How long to keep trying to re-attach after a move (at least the server's RetryInfo delay); default 120 s. */
  moveTimeoutMs?: number;
  /** Told each move the stream follows (to log it); the moves are also in {@link PhaseStream.moves}. */
  onMove?: (move: PhaseMove) => void;
}

/** The first re-attach is immediate (WatchPhase waits for the adopter's events itself); a re-attach
 * answered by another move or an unreachable replica is retried after 0.2 s, doubling up to 2 s. */
const FIRST_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 2000;
export const DEFAULT_MOVE_TIMEOUT_MS = 120_000;

type Open = (signal: AbortSignal) => AsyncIterable<Batch>;
/** Re-attaches after `move` (whose metadata names the phase) from `afterSequence`. */
type Reattach = (afterSequence: bigint, move: PhaseMove, signal: AbortSignal) => AsyncIterable<Batch>;

/**
 * The events of one phase (`for await`), then its {@link PhaseStream.result}.
 *
 * Iteration yields every event in sequence order and ends when the result arrives. A failed
 * call throws a {@link RunnerError}; so does a stream that ends without a result (code
 * `Internal`). {@link PhaseStream.cancel} (or breaking out of the loop) cancels the call and
 * ends the iteration quietly;
 * cancelling RunPhase cancels the phase unless it was started with `ON_DISCONNECT_DETACH`.
 *
 * **Moves.** When the replica serving the stream drains, it hands the phase over to another
 * replica and ends the stream with `UNAVAILABLE` / `PHASE_MOVED`. The stream then calls
 * `WatchPhase` after the last sequence it yielded, through the same client (a Kubernetes
 * Service reaches a replica that is not draining once the draining one closes its connection),
 * and goes on: one gap-free sequence, each event once. Each move is in {@link PhaseStream.moves}
 * and told to `onMove`. After a move the stream is a watch: cancelling it no longer cancels the
 * phase (use `CancelPhase`).
 */
export class PhaseStream implements AsyncIterable<StreamEvent> {
  /** The final result, once iteration has reached it. */
  result: PhaseResult | undefined;
  /** The sequence of the last event yielded (the re-attach cursor). */
  lastSequence = 0n;
  /** The moves this stream followed, in order. */
  readonly moves: PhaseMove[] = [];
  private readonly controller: AbortController;
  private readonly open: Open;
  private readonly reattach: Reattach | undefined;
  private readonly options: FollowOptions;
  private started = false;
  private cancelled = false;

  /** Wraps `open(signal)`, which starts the call; `reattach(after, signal)` re-attaches after a move. */
  constructor(open: Open, reattach?: Reattach, options: FollowOptions = {}) {
    this.controller = new AbortController();
    this.open = open;
    this.reattach = options.reattach === false ? undefined : reattach;
    this.options = options;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<StreamEvent, void, undefined> {
    if (this.started) throw new Error("a PhaseStream can be iterated once");
    this.started = true;
    let batches: AsyncIterator<Batch> = this.open(this.controller.signal)[Symbol.asyncIterator]();
    try {
      for (;;) {
        let next: IteratorResult<Batch>;
        try {
          next = await batches.next();
        } catch (error) {
          if (this.cancelled) return; // cancel() ends the iteration quietly
          const e = RunnerError.from(error);
          if (!this.reattach || !e.phaseMoved) throw e;
          const followed = await this.follow(e);
          if (followed === undefined) return; // cancelled while re-attaching
          batches = followed;
          continue;
        }
        if (next.done) break;
        for (const event of next.value.events) {
          // Events at or below the cursor were delivered before a move: never twice.
          if (event.sequence <= this.lastSequence) continue;
          this.lastSequence = event.sequence;
          yield event;
        }
        if (next.value.result) {
          this.result = next.value.result;
          return;
        }
      }
    } catch (error) {
      if (this.cancelled) return;
      throw RunnerError.from(error);
    } finally {
      if (!this.result) this.controller.abort();
    }
    throw new RunnerError(Code.Internal, "the phase stream ended without a PhaseResult", undefined);
  }

  /**
   * Re-attaches after `moved` (a PHASE_MOVED end): WatchPhase after our own cursor, retried while
   * the answer is another move, a draining or an unreachable replica, for at most the move
   * timeout. Returns the new call's batches with its first one put back, or undefined if cancelled.
   */
  private async follow(moved: RunnerError): Promise<AsyncIterator<Batch> | undefined> {
    const meta = moved.metadata;
    const move: PhaseMove = {
      jobId: meta["job_id"] ?? "",
      phaseId: meta["phase_id"] ?? "",
      fromReplica: meta["from_replica"] ?? "",
      afterSequence: BigInt(meta["after_sequence"] || "0"),
      message: moved.rawMessage,
    };
    this.moves.push(move);
    this.options.onMove?.(move);
    const timeout = Math.max(this.options.moveTimeoutMs ?? DEFAULT_MOVE_TIMEOUT_MS, moved.retryDelayMs ?? 0);
    const deadline = Date.now() + timeout;
    let backoff = FIRST_BACKOFF_MS;
    for (;;) {
      if (this.cancelled) return undefined;
      const batches = this.reattach!(this.lastSequence, move, this.controller.signal)[Symbol.asyncIterator]();
      try {
        const first = await batches.next();
        return prepend(first, batches);
      } catch (error) {
        if (this.cancelled) return undefined;
        const e = RunnerError.from(error);
        // Canceled: not ours (this.cancelled is checked above) but the old replica's server stopping
        // under the re-attach, as it does at the end of its drain: the phase goes on elsewhere.
        const retry = e.phaseMoved || e.code === Code.Unavailable || e.code === Code.Canceled || e.reason === "DRAINING";
        if (!retry || Date.now() + backoff > deadline) throw e;
        await sleep(backoff, this.controller.signal);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      }
    }
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

/** An iterator that gives `first` again, then the rest of `rest`. */
function prepend(first: IteratorResult<Batch>, rest: AsyncIterator<Batch>): AsyncIterator<Batch> {
  let given = false;
  return {
    next: () => {
      if (given) return rest.next();
      given = true;
      return Promise.resolve(first);
    },
    return: (value?: unknown) => rest.return?.(value) ?? Promise.resolve({ done: true, value: undefined }),
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });
}

/** Starts a phase and streams it: events, then the result (following it if it moves). */
export function runPhase(
  client: RunnerClient,
  request: MessageInitShape<typeof RunPhaseRequestSchema>,
  options: FollowOptions = {},
): PhaseStream {
  const message = create(RunPhaseRequestSchema, request);
  return new PhaseStream(
    (signal) => client.runPhase(message, { signal }),
    // The move names the phase (a request may leave phase_id to the server's default).
    (afterSequence, move, signal) =>
      watchCall(client, move.jobId || message.jobId, move.phaseId || message.phaseId, afterSequence, signal),
    options,
  );
}

/** Attaches to a phase: events after `afterSequence` (recorded, then live), then the result
 * (following it if it moves). */
export function watchPhase(
  client: RunnerClient,
  jobId: string,
  phaseId: string,
  afterSequence: bigint = 0n,
  options: FollowOptions = {},
): PhaseStream {
  const stream = new PhaseStream(
    (signal) => watchCall(client, jobId, phaseId, afterSequence, signal),
    (after, _move, signal) => watchCall(client, jobId, phaseId, after, signal),
    options,
  );
  stream.lastSequence = afterSequence;
  return stream;
}

function watchCall(client: RunnerClient, jobId: string, phaseId: string, afterSequence: bigint, signal: AbortSignal) {
  return client.watchPhase(create(WatchPhaseRequestSchema, { jobId, phaseId, afterSequence }), { signal });
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

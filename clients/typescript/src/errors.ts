import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason, ErrorReasonSchema } from "./gen/helix/runner/v1/runner_service_pb.js";

/** The `ErrorInfo.domain` of every error the service sends. */
export const ERROR_DOMAIN = "runner.helix";

/**
 * `ErrorInfo.reason` of a phase stream that ended because its replica handed the phase over to
 * another one (a drain): metadata `job_id`, `phase_id`, `after_sequence` (every event up to it was
 * delivered) and `from_replica`; `WatchPhase(after_sequence)` on any replica gives the rest.
 */
export const PHASE_MOVED = "PHASE_MOVED";

/** The `google.rpc.ErrorInfo` detail of a failed call (from `grpc-status-details-bin`), if any. */
export function errorInfo(error: unknown): ErrorInfo | undefined {
  if (error instanceof RunnerError) return error.info;
  return ConnectError.from(error).findDetails(ErrorInfoSchema)[0];
}

/** A failed call: the gRPC code and message, and the decoded `ErrorInfo` when there is one. */
export class RunnerError extends Error {
  override name = "RunnerError";

  constructor(
    /** The gRPC status code. */
    readonly code: Code,
    /** The status message as the server sent it. */
    readonly rawMessage: string,
    /** The decoded ErrorInfo. */
    readonly info: ErrorInfo | undefined,
    options?: { cause?: unknown; retryDelayMs?: number },
  ) {
    super(`${Code[code] ?? code}: ${rawMessage}${info ? ` [${info.reason}]` : ""}`, options);
    this.retryDelayMs = options?.retryDelayMs;
  }

  /** Milliseconds from the status's `google.rpc.RetryInfo`, when the server sent one. */
  readonly retryDelayMs: number | undefined;

  /** Converts anything thrown by a call (a ConnectError, an AbortError...) into a RunnerError. */
  static from(error: unknown): RunnerError {
    if (error instanceof RunnerError) return error;
    const connectError = ConnectError.from(error);
    const info = connectError.findDetails(ErrorInfoSchema)[0];
    const delay = connectError.findDetails(RetryInfoSchema)[0]?.retryDelay;
    const retryDelayMs = delay ? Number(delay.seconds) * 1000 + delay.nanos / 1e6 : undefined;
    return new RunnerError(connectError.code, connectError.rawMessage, info, { cause: error, retryDelayMs });
  }

  /** Whether this ended a phase stream because the phase moved to another replica (`PHASE_MOVED`). */
  get phaseMoved(): boolean {
    return this.info?.domain === ERROR_DOMAIN && this.info.reason === PHASE_MOVED;
  }

  /** `ErrorInfo.reason` (e.g. `"PHASE_NOT_FOUND"`). */
  get reason(): string | undefined {
    return this.info?.reason;
  }

  /** `ErrorInfo.domain` (`"runner.helix"` for this service's errors). */
  get domain(): string | undefined {
    return this.info?.domain;
  }

  /** `ErrorInfo.metadata` (empty without an ErrorInfo). */
  get metadata(): Record<string, string> {
    return this.info?.metadata ?? {};
  }

  /** The reason as the contract's `ErrorReason`, when this client knows it. */
  get errorReason(): ErrorReason | undefined {
    if (!this.info || this.info.domain !== ERROR_DOMAIN) return undefined;
    const name = `ERROR_REASON_${this.info.reason}`;
    return ErrorReasonSchema.values.find((v) => v.name === name)?.number as ErrorReason | undefined;
  }
}

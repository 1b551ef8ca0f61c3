import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
import { ErrorReason, ErrorReasonSchema } from "./gen/helix/runner/v1/runner_service_pb.js";

/** The `ErrorInfo.domain` of every error the service sends. */
export const ERROR_DOMAIN = "runner.helix";

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
    options?: { cause?: unknown },
  ) {
    super(`${Code[code] ?? code}: ${rawMessage}${info ? ` [${info.reason}]` : ""}`, options);
  }

  /** Converts anything thrown by a call (a ConnectError, an AbortError...) into a RunnerError. */
  static from(error: unknown): RunnerError {
    if (error instanceof RunnerError) return error;
    const connectError = ConnectError.from(error);
    const info = connectError.findDetails(ErrorInfoSchema)[0];
    return new RunnerError(connectError.code, connectError.rawMessage, info, { cause: error });
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

/**
 * TypeScript client for the Helix Runner gRPC service (`helix.runner.v1.RunnerService`).
 *
 * The messages and the service descriptor are generated from the repository's `proto/` by
 * protoc-gen-es v2 (under `src/gen`, re-exported here); calls go over `@connectrpc/connect-node`
 * speaking the gRPC protocol. Helpers: {@link createRunnerClient}, {@link runPhase} /
 * {@link watchPhase} (a {@link PhaseStream} of events that ends with the result) and
 * {@link RunnerError} (the decoded `google.rpc.ErrorInfo` of a failed call).
 */
export * from "./gen/helix/runner/v1/runner_service_pb.js";
export * from "./gen/helix/runner/v1/events_pb.js";
export * from "./gen/helix/runner/v1/resources_pb.js";
export { ErrorInfoSchema, type ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
export {
  createRunnerClient,
  createRunnerTransport,
  type RunnerClient,
  type RunnerClientOptions,
} from "./client.js";
export {
  PhaseStream,
  runPhase,
  watchPhase,
  eventKind,
  enumName,
  DEFAULT_MOVE_TIMEOUT_MS,
  type FollowOptions,
  type PhaseMove,
} from "./phase.js";
export { RunnerError, errorInfo, ERROR_DOMAIN, PHASE_MOVED } from "./errors.js";

/** The protobuf package this client speaks. */
export const CONTRACT = "helix.runner.v1";
/** The package version; it follows the helix-runner release whose `proto/` it was generated from. */
export const VERSION = "0.1.0";

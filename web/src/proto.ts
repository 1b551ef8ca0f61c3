/**
 * The generated code and helpers of the TypeScript client (`clients/typescript`), in one place:
 * the page speaks the same contract with the same generated descriptors, over Connect-Web.
 */
export * from "../../clients/typescript/src/gen/helix/runner/v1/events_pb.js";
export * from "../../clients/typescript/src/gen/helix/runner/v1/resources_pb.js";
export * from "../../clients/typescript/src/gen/helix/runner/v1/runner_service_pb.js";
export { RunnerError } from "../../clients/typescript/src/errors.js";
export { watchPhase, enumName, eventKind, type PhaseMove } from "../../clients/typescript/src/phase.js";

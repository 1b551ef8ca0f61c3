// Runs one phase and prints its events as they arrive, then the result.
//
//   node dist/examples/run_phase.js [--addr 127.0.0.1:50051] [--job-id ID] [--allow TOOL]... --workdir DIR PROMPT
//
// The working directory must be inside one of the server's workspace roots. The first line names
// the job and phase, for `node dist/examples/watch_phase.js JOB_ID PHASE_ID`.
import { parseArgs } from "node:util";
import {
  createRunnerClient,
  enumName,
  eventKind,
  PhaseStatus,
  PhaseStatusSchema,
  RunnerError,
  runPhase,
  type StreamEvent,
} from "../src/index.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    addr: { type: "string", default: "127.0.0.1:50051" },
    "job-id": { type: "string", default: `example-${process.pid}` },
    workdir: { type: "string" },
    allow: { type: "string", multiple: true, default: [] },
  },
});
if (!values.workdir || positionals.length !== 1) {
  console.error("usage: run_phase [--addr HOST:PORT] [--job-id ID] [--allow TOOL]... --workdir DIR PROMPT");
  process.exit(2);
}

const client = createRunnerClient({ address: values.addr });
const phase = runPhase(client, {
  jobId: values["job-id"],
  prompt: positionals[0],
  workingDir: values.workdir,
  options: { allowedTools: values.allow },
});
try {
  for await (const event of phase) {
    if (event.sequence === 1n) {
      console.log(`job ${event.jobId} phase ${event.phaseId}`); // the ids watch_phase re-attaches with
    }
    console.log(`#${String(event.sequence).padEnd(4)} ${eventKind(event).padEnd(20)} ${summary(event.payload)}`);
  }
  const result = phase.result!;
  console.log(`${enumName(PhaseStatusSchema, result.status)} (${result.reason}): ${result.resultText.split("\n")[0]}`);
  process.exitCode = result.status === PhaseStatus.SUCCEEDED ? 0 : 1;
} catch (error) {
  const err = RunnerError.from(error);
  console.error(`error: ${err.message}`, err.metadata);
  process.exitCode = 1;
}

function summary(payload: StreamEvent["payload"]): string {
  switch (payload.case) {
    case "statusChanged":
      return `${enumName(PhaseStatusSchema, payload.value.fromStatus)} -> ${enumName(PhaseStatusSchema, payload.value.toStatus)}`;
    case "assistantText":
      return payload.value.text;
    case "toolCallStarted":
      return `${payload.value.name} ${payload.value.inputJson}`;
    case "toolCallFinished":
      return `${payload.value.name} error=${payload.value.isError} ${payload.value.contentPreview.trimEnd()}`;
    case "turnResult":
      return `${payload.value.subtype} turns=${payload.value.numTurns}`;
    default:
      return "";
  }
}

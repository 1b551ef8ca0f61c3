// Attaches to a running or finished phase from a sequence cursor and prints its events, then the result.
//
//   node dist/examples/watch_phase.js [--addr 127.0.0.1:50051] JOB_ID PHASE_ID [AFTER_SEQUENCE]
import { parseArgs } from "node:util";
import { createRunnerClient, enumName, eventKind, PhaseStatusSchema, RunnerError, watchPhase } from "../src/index.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { addr: { type: "string", default: "127.0.0.1:50051" } },
});
if (positionals.length < 2 || positionals.length > 3 || !/^\d*$/.test(positionals[2] ?? "")) {
  console.error("usage: watch_phase [--addr HOST:PORT] JOB_ID PHASE_ID [AFTER_SEQUENCE]");
  process.exit(2);
}
const [jobId, phaseId, after] = positionals as [string, string, string | undefined];

const client = createRunnerClient({ address: values.addr });
const phase = watchPhase(client, jobId, phaseId, BigInt(after ?? 0));
try {
  for await (const event of phase) console.log(`#${String(event.sequence).padEnd(4)} ${eventKind(event)}`);
  const result = phase.result!;
  console.log(`${enumName(PhaseStatusSchema, result.status)} (${result.reason}) last_sequence=${result.lastSequence}`);
} catch (error) {
  const err = RunnerError.from(error);
  console.error(`error: ${err.message}`, err.metadata);
  process.exitCode = 1;
}

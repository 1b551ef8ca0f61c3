// Benchmark program (driven by benchmarks/bench_clients.py): runs one phase and reports, as JSON,
// how many events arrived, when the first and last arrived, and the live latency of every
// assistant text that carries a `ts=<unix ns>` stamp written by the benchmark's fake CLI.
//
//   node dist/examples/bench_events.js ADDRESS WORKDIR JOB_ID PROMPT
import { createRunnerClient, enumName, PhaseStatusSchema, runPhase } from "@helix/runner-client";

const [address, workingDir, jobId, prompt] = process.argv.slice(2);
if (!address || !workingDir || !jobId || !prompt) {
  console.error("usage: bench_events.js ADDRESS WORKDIR JOB_ID PROMPT");
  process.exit(2);
}
// Wall-clock nanoseconds with sub-millisecond resolution (Date.now() has only milliseconds).
const origin = BigInt(Math.round(performance.timeOrigin * 1e6));
const nowNs = (): bigint => origin + BigInt(Math.round(performance.now() * 1e6));

const phase = runPhase(createRunnerClient({ address }), { jobId, prompt, workingDir });
let events = 0;
let first = 0n;
let last = 0n;
const latencies: bigint[] = [];
for await (const event of phase) {
  const now = nowNs();
  if (events === 0) first = now;
  last = now;
  events++;
  if (event.payload.case === "assistantText" && event.payload.value.text.startsWith("ts=")) {
    latencies.push(now - BigInt(event.payload.value.text.slice(3).split(" ")[0]!));
  }
}
const status = phase.result ? enumName(PhaseStatusSchema, phase.result.status) : "";
const report = `{"events":${events},"first_ns":${first},"last_ns":${last},"status":"${status}","latencies_ns":[${latencies.join(",")}]}`;
// Exit once the (large) report is flushed: writes to a pipe are asynchronous in Node.
process.stdout.write(`${report}\n`, () => process.exit(0));

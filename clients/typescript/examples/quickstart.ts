import { createRunnerClient, enumName, eventKind, PhaseStatusSchema, runPhase } from "@helix/runner-client";

const [address, workingDir] = process.argv.slice(2);
const client = createRunnerClient({ address });
const phase = runPhase(client, { jobId: "quickstart", prompt: "Say hello", workingDir });
for await (const event of phase) {
  console.log(`${event.sequence} ${eventKind(event)}`);
}
console.log(enumName(PhaseStatusSchema, phase.result!.status), phase.result!.resultText);

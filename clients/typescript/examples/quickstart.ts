import { createRunnerClient, enumName, eventKind, PhaseStatusSchema, runPhase } from "@helix/runner-client";

const [address, workingDir] = process.argv.slice(2);
const client = createRunnerClient({ address });
const phase = runPhase(client, { jobId: "quickstart", prompt: "Say hello", workingDir });
for await (const event of phase) {
  console.log(`${event.sequence} ${eventKind(event)}`);
}
const result = phase.result!;
console.log("job", result.jobId, "phase", result.phaseId); // what watchPhase needs
console.log(enumName(PhaseStatusSchema, result.status), result.resultText);

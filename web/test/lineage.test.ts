// The job page's lineage (src/views/fork.tsx): each fork drawn under the phase it came from, in
// order, and a listing that would lose a phase drawn flat instead. Run by node's test runner
// (scripts/build-web).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { PhaseSchema, type Phase } from "../src/proto.js";

// The view's module makes the page's client at import, from the page's origin: give it one.
(globalThis as { location?: { origin: string } }).location = { origin: "http://127.0.0.1:1" };
const { lineage } = await import("../src/views/fork.js");

function phase(phaseId: string, from = ""): Phase {
  return create(PhaseSchema, { jobId: "j", phaseId, forkedFrom: from ? { jobId: "j", phaseId: from } : undefined });
}

const drawn = (phases: Phase[]) => lineage(phases).map(({ phase, depth }) => `${"  ".repeat(depth)}${phase.phaseId}`);

test("each fork sits under the phase it came from, a fork of a fork one deeper", () => {
  const phases = [phase("a"), phase("b"), phase("a-1", "a"), phase("a-1-1", "a-1"), phase("a-2", "a")];
  assert.deepEqual(drawn(phases), ["a", "  a-1", "    a-1-1", "  a-2", "b"]);
});

test("a fork whose origin is not in the job (or itself) is a root; nothing is lost or repeated", () => {
  assert.deepEqual(drawn([phase("x", "gone"), phase("y", "y"), phase("z", "x")]), ["x", "  z", "y"]);
  // A cycle (two phases naming each other) cannot be a tree: the flat list, each phase once.
  assert.deepEqual(drawn([phase("p", "q"), phase("q", "p")]), ["p", "q"]);
});

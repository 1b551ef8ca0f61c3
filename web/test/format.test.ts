// The figures' formatters (src/format.ts): a cost not reported reads "–" everywhere, counts agree
// in number (issue 22, item 14). Run by node's test runner (scripts/build-web).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { CostTotalsSchema, ModelCostSchema } from "../src/proto.js";
import { plural, reportedTotal, sumKnown, usd } from "../src/format.js";

test("a cost the CLI did not report is a dash, a zero it reported is $0", () => {
  assert.equal(usd(undefined), "–");
  assert.equal(usd(null), "–");
  assert.equal(usd(0), "$0.0000");
  assert.equal(usd(0.00123), "$0.0012");
});

test("a job's or project's reported total is a dash until some phase reported one", () => {
  const computedOnly = create(CostTotalsSchema, {
    reportedUsd: 0,
    computedUsd: 0.004,
    phaseCount: 2,
    models: [create(ModelCostSchema, { model: "m", computedUsd: 0.004 })],
  });
  assert.equal(usd(reportedTotal(computedOnly)), "–");
  assert.equal(usd(reportedTotal(undefined)), "–");
  const reported = create(CostTotalsSchema, {
    reportedUsd: 0.003,
    computedUsd: 0.004,
    models: [create(ModelCostSchema, { model: "m", computedUsd: 0.004, reportedUsd: 0.003 })],
  });
  assert.equal(usd(reportedTotal(reported)), "$0.0030");
});

test("sums of figures that may be missing", () => {
  assert.equal(sumKnown([undefined, undefined]), undefined);
  assert.equal(sumKnown([undefined, 0.5, 0.25]), 0.75);
  assert.equal(sumKnown([]), undefined);
});

test("counts agree in number", () => {
  assert.equal(plural(1, "phase"), "1 phase");
  assert.equal(plural(2, "phase"), "2 phases");
  assert.equal(plural(0, "tool call"), "0 tool calls");
  assert.equal(plural(1n, "turn"), "1 turn");
  assert.equal(plural(3, "process", "processes"), "3 processes");
});

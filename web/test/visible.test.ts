// The page shows what the CLI shows (src/visible.ts and cli/visible.py, one table): the shared
// cases of tests/fixtures/visible/cases.json, and JSON escaping that keeps the value.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { escapedJson, visible } from "../src/visible.js";

const cases: Array<{ what: string; text: string; visible: string }> = JSON.parse(
  readFileSync(join(process.cwd(), "..", "tests", "fixtures", "visible", "cases.json"), "utf8"));

for (const c of cases) {
  test(`visible: ${c.what}`, () => {
    assert.equal(visible(c.text), c.visible);
  });
}

test("escaped JSON parses to the same value and holds nothing to obey", () => {
  const value = { command: "echo \u202eevil\u202c \u001b]52;c;eA==\u0007 \u{e0041} é 👨‍👩‍👧" };
  const escaped = escapedJson(JSON.stringify(value));
  assert.deepEqual(JSON.parse(escaped), value);
  assert.ok(!/[\u001b\u0007\u202e\u202c]/.test(escaped));
  assert.ok(escaped.includes("\\u202e") && escaped.includes("é") && escaped.includes("👨‍👩‍👧"));
});

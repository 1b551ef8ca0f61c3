/**
 * Formatters of figures, shared by every view so one figure reads the same on every page and in the
 * `helix-runner` CLI: a cost the CLI did not report is "–", never "$0.0000" (issue 22, item 14).
 * Pure functions (no DOM, no hooks): node's test runner checks them (test/format.test.ts).
 */
import type { CostTotals } from "./proto.js";

/** Dollars with `digits` decimals; "–" for a figure that is not there (not reported, not known). */
export function usd(value: number | undefined | null, digits = 4): string {
  return value === undefined || value === null ? "–" : `$${value.toFixed(digits)}`;
}

/** An axis tick in dollars with three significant digits ($0.00035, $1.25). */
export function money(value: number): string {
  return value === 0 ? "$0" : `$${Number(value.toPrecision(3))}`;
}

/** "1 phase", "2 phases"; `many` when the plural is not `one` + "s". */
export function plural(n: number | bigint, one: string, many = `${one}s`): string {
  return `${n} ${Number(n) === 1 ? one : many}`;
}

/**
 * The CLI-reported total of a job or project, or `undefined` when no phase in it reported one.
 * CostTotals.reported_usd is a plain sum (0 when nothing was reported); its per-model rows say
 * whether anything was: a model's reported_usd is unset until the CLI reports it.
 */
export function reportedTotal(totals: CostTotals | undefined): number | undefined {
  if (!totals || !totals.models.some((m) => m.reportedUsd !== undefined)) return undefined;
  return totals.reportedUsd;
}

/** The sum of figures that may be missing: `undefined` when every one is. */
export function sumKnown(values: readonly (number | undefined)[]): number | undefined {
  const known = values.filter((v): v is number => v !== undefined);
  return known.length ? known.reduce((a, b) => a + b, 0) : undefined;
}

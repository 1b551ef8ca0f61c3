/**
 * A project's cost by phase and by model over a date range. The server's per-phase costs
 * (Phase.cost from ListJobs, the same figures GetCostTotals sums) are grouped here for the chosen
 * days; GetCostTotals gives the project's all-time totals beside them.
 */
import type { ChartConfiguration } from "chart.js";
import { useMemo, useState } from "preact/hooks";
import { client } from "../api.js";
import { COLORS, ChartCanvas } from "../charts.js";
import type { Phase } from "../proto.js";
import { ms } from "../reducer.js";
import { href, money, plural, reportedTotal, sumKnown, usd, usePoll } from "../util.js";
import { Problem } from "./common.js";

const MAX_PAGES = 20;

interface Row {
  label: string;
  reported: number | undefined; // undefined: the CLI reported nothing for it
  computed: number;
}

function day(offsetDays: number): string {
  const d = new Date(Date.now() + offsetDays * 86_400_000);
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, "0")}-${String(d.getDate()).padStart(2, "0")}`;
}

export function CostsView({ params }: { params: URLSearchParams }) {
  const [project, setProject] = useState(params.get("project") ?? "");
  const [from, setFrom] = useState(params.get("from") ?? day(-30));
  const [to, setTo] = useState(params.get("to") ?? day(0));
  const phases = usePoll(
    async (signal) => {
      const out: Phase[] = [];
      let pageToken = "";
      for (let page = 0; page < MAX_PAGES; page++) {
        const r = await client.listJobs({ projectId: project.trim(), pageSize: 500, pageToken }, { signal });
        for (const job of r.jobs) out.push(...job.phases);
        pageToken = r.nextPageToken;
        if (!pageToken) break;
      }
      return out;
    },
    [project],
    10_000,
  );
  const totals = usePoll((signal) => client.getCostTotals({ projectId: project.trim() }, { signal }), [project], 10_000);
  const start = new Date(`${from}T00:00:00`).getTime();
  const end = new Date(`${to}T00:00:00`).getTime() + 86_400_000;
  const inRange = (phases.data ?? []).filter((p) => {
    const t = ms(p.createTime) ?? 0;
    return t >= start && t < end;
  });
  // `reported` stays undefined where the CLI reported nothing ("–", as on the phase page and in the CLI).
  const byPhase: Row[] = inRange
    .map((p) => ({ label: `${p.jobId}/${p.phaseId}`, reported: p.cost?.reportedUsd, computed: p.cost?.computedUsd ?? 0 }))
    .sort((a, b) => b.computed - a.computed);
  const models = new Map<string, Row>();
  for (const p of inRange) {
    for (const m of p.cost?.models ?? []) {
      const row = models.get(m.model) ?? { label: m.model, reported: undefined, computed: 0 };
      row.reported = sumKnown([row.reported, m.reportedUsd]);
      row.computed += m.computedUsd;
      models.set(m.model, row);
    }
  }
  const byModel = [...models.values()].sort((a, b) => b.computed - a.computed);
  const t = totals.data?.totals;
  return (
    <section>
      <nav class="crumbs">
        <a href="#/">Jobs</a> / <span>Project costs</span>
      </nav>
      <div class="toolbar">
        <h1>Project costs</h1>
        <label>
          Project <input value={project} placeholder="default project" onInput={(e) => setProject(e.currentTarget.value)} data-testid="cost-project" />
        </label>
        <label>
          From <input type="date" value={from} onInput={(e) => setFrom(e.currentTarget.value)} />
        </label>
        <label>
          To <input type="date" value={to} onInput={(e) => setTo(e.currentTarget.value)} />
        </label>
      </div>
      <Problem polled={phases} />
      <p data-testid="range-totals">
        {plural(inRange.length, "phase")} in range: <strong>{usd(byPhase.reduce((n, r) => n + r.computed, 0))}</strong> computed,{" "}
        <strong>{usd(sumKnown(byPhase.map((r) => r.reported)))}</strong> CLI-reported.
        {t && (
          <span class="muted">
            {" "}
            All time ({plural(t.phaseCount, "phase")}): {usd(t.computedUsd)} computed, {usd(reportedTotal(t))} CLI-reported
            {t.unpricedModels.length ? `; not priced: ${t.unpricedModels.join(", ")}` : ""}.
          </span>
        )}
      </p>
      <div class="panels two">
        <div class="panel">
          <h2>By phase</h2>
          <RowsChart rows={byPhase.slice(0, 40)} testid="cost-by-phase" horizontal />
        </div>
        <div class="panel">
          <h2>By model</h2>
          <RowsChart rows={byModel} testid="cost-by-model" />
        </div>
        <div class="panel wide">
          <table class="grid compact">
            <thead>
              <tr>
                <th>Phase</th>
                <th class="num">Computed</th>
                <th class="num">CLI-reported</th>
              </tr>
            </thead>
            <tbody>
              {byPhase.map((r) => {
                const [job, phase] = r.label.split("/");
                return (
                  <tr>
                    <td>
                      <a href={href("jobs", job, "phases", phase)}>{r.label}</a>
                    </td>
                    <td class="num">{usd(r.computed)}</td>
                    <td class="num">{usd(r.reported)}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      </div>
    </section>
  );
}

function RowsChart({ rows, testid, horizontal = false }: { rows: Row[]; testid: string; horizontal?: boolean }) {
  const config = useMemo<ChartConfiguration>(
    () => ({
      type: "bar",
      data: {
        labels: rows.map((r) => r.label),
        datasets: [
          { label: "CLI-reported", data: rows.map((r) => r.reported ?? 0), backgroundColor: COLORS.reported },
          { label: "computed", data: rows.map((r) => r.computed), backgroundColor: COLORS.computed },
        ],
      },
      options: {
        indexAxis: horizontal ? "y" : "x",
        scales: { [horizontal ? "x" : "y"]: { beginAtZero: true, ticks: { callback: (v: string | number) => money(Number(v)) } } },
      },
    }),
    [JSON.stringify(rows)],
  );
  if (rows.length === 0) return <p class="empty">No phases in this range.</p>;
  return <ChartCanvas config={config} testid={testid} height={horizontal ? Math.max(240, Math.min(600, 60 + rows.length * 28)) : 240} label={testid} />;
}

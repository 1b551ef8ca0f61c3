/** The jobs list (filter by project and status) and one job's phases; both follow status changes. */
import { useState } from "preact/hooks";
import { client } from "../api.js";
import { PhaseStatus, type Job, type Phase } from "../proto.js";
import { ms } from "../reducer.js";
import { duration, href, reportedTotal, statusClass, statusName, usd, usePoll, when } from "../util.js";
import { Problem } from "./common.js";
import { lineage } from "./fork.js";

const ACTIVE = [PhaseStatus.PENDING, PhaseStatus.RUNNING, PhaseStatus.PAUSING, PhaseStatus.PAUSED, PhaseStatus.AWAITING_APPROVAL];
const STATUS_FILTERS: { label: string; statuses: PhaseStatus[] }[] = [
  { label: "any status", statuses: [] },
  { label: "active", statuses: ACTIVE },
  ...[
    PhaseStatus.RUNNING,
    PhaseStatus.PAUSED,
    PhaseStatus.AWAITING_APPROVAL,
    PhaseStatus.SUCCEEDED,
    PhaseStatus.FAILED,
    PhaseStatus.INCOMPLETE,
    PhaseStatus.TIMED_OUT,
    PhaseStatus.CANCELLED,
    PhaseStatus.INTERRUPTED,
  ].map((s) => ({ label: statusName(s).toLowerCase().replace(/_/g, " "), statuses: [s] })),
];

export function StatusBadge({ status, testid }: { status: PhaseStatus; testid?: string }) {
  return (
    <span class={`badge ${statusClass(status)}`} data-testid={testid} data-status={statusName(status)}>
      {statusName(status).replace(/_/g, " ")}
    </span>
  );
}

export function JobsView() {
  const [project, setProject] = useState("");
  const [filter, setFilter] = useState(0);
  const statuses = STATUS_FILTERS[filter].statuses;
  const jobs = usePoll(
    (signal) => client.listJobs({ projectId: project.trim(), statuses, pageSize: 100 }, { signal }),
    [project, filter],
  );
  return (
    <section>
      <div class="toolbar">
        <h1>Jobs</h1>
        <label>
          Project <input value={project} placeholder="all projects" onInput={(e) => setProject(e.currentTarget.value)} data-testid="project-filter" />
        </label>
        <label>
          Status{" "}
          <select value={filter} onChange={(e) => setFilter(Number(e.currentTarget.value))} data-testid="status-filter">
            {STATUS_FILTERS.map((f, i) => (
              <option value={i}>{f.label}</option>
            ))}
          </select>
        </label>
        <a class="button" href={`#/costs${project.trim() ? `?project=${encodeURIComponent(project.trim())}` : ""}`}>
          Project costs
        </a>
      </div>
      <Problem polled={jobs} />
      <table class="grid" data-testid="jobs">
        <thead>
          <tr>
            <th>Job</th>
            <th>Project</th>
            <th>Status</th>
            <th>Phases</th>
            <th class="num">Computed</th>
            <th class="num">CLI-reported</th>
            <th>Updated</th>
          </tr>
        </thead>
        <tbody>
          {jobs.data?.jobs.map((job) => <JobRow job={job} />)}
          {jobs.data && jobs.data.jobs.length === 0 && (
            <tr>
              <td colSpan={7} class="empty">
                No jobs match. Start a phase (README: “A short tour”) and it appears here live.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </section>
  );
}

function JobRow({ job }: { job: Job }) {
  return (
    <tr data-job={job.jobId}>
      <td>
        <a href={href("jobs", job.jobId)}>{job.jobId}</a>
      </td>
      <td>{job.projectId}</td>
      <td>
        <StatusBadge status={job.status} />
      </td>
      <td>{job.phases.length}</td>
      <td class="num" data-testid="computed">{usd(job.cost?.computedUsd)}</td>
      <td class="num" data-testid="reported">{usd(reportedTotal(job.cost))}</td>
      <td>{when(job.updateTime)}</td>
    </tr>
  );
}

export function JobView({ jobId }: { jobId: string }) {
  const job = usePoll((signal) => client.getJob({ jobId }, { signal }), [jobId]);
  const j = job.data?.job;
  return (
    <section>
      <nav class="crumbs">
        <a href="#/">Jobs</a> / <span>{jobId}</span>
      </nav>
      <Problem polled={job} />
      {j && (
        <>
          <div class="toolbar">
            <h1>{j.jobId}</h1>
            <StatusBadge status={j.status} />
            <span class="muted">project {j.projectId}</span>
            <span class="muted">
              {usd(j.cost?.computedUsd)} computed · {usd(reportedTotal(j.cost))} CLI-reported
            </span>
          </div>
          <table class="grid" data-testid="phases">
            <thead>
              <tr>
                <th>Phase</th>
                <th>Status</th>
                <th>Current tool</th>
                <th>Model</th>
                <th>Started</th>
                <th>Elapsed</th>
                <th class="num">Tool calls</th>
                <th class="num">Computed</th>
                <th class="num">Events</th>
              </tr>
            </thead>
            <tbody>
              {lineage(j.phases).map(({ phase, depth }) => (
                <PhaseRow phase={phase} depth={depth} />
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

function PhaseRow({ phase, depth = 0 }: { phase: Phase; depth?: number }) {
  const start = ms(phase.startTime);
  const end = ms(phase.endTime) ?? Date.now();
  const calls = phase.toolStats.reduce((n, s) => n + Number(s.count), 0);
  return (
    <tr data-phase={phase.phaseId}>
      <td>
        {depth > 0 && <span class="branch">{"\u00a0\u00a0".repeat(depth - 1)}└─ </span>}
        <a href={href("jobs", phase.jobId, "phases", phase.phaseId)}>{phase.phaseId}</a>
        {phase.forkedFrom?.phaseId && <span class="muted" data-testid="forked-from-cell"> from {phase.forkedFrom.phaseId}@{phase.forkedFrom.checkpoint}</span>}
      </td>
      <td>
        <StatusBadge status={phase.status} />
      </td>
      <td>{phase.currentTool?.name ?? ""}</td>
      <td>{phase.model}</td>
      <td>{when(phase.startTime)}</td>
      <td>{start === undefined ? "–" : duration(end - start)}</td>
      <td class="num">{calls}</td>
      <td class="num">{usd(phase.cost?.computedUsd)}</td>
      <td class="num">{String(phase.lastSequence)}</td>
    </tr>
  );
}

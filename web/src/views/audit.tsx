/**
 * The audit trail (docs/tenancy.md): every action taken through the API, newest first: who, what,
 * on which job, how it ended. Read with ListAuditEntries (needs the admin role), refreshed every
 * 2 seconds.
 */
import { client } from "../api.js";
import { href, usePoll, when } from "../util.js";
import { Problem } from "./common.js";

export function AuditView() {
  const log = usePoll((signal) => client.listAuditEntries({ pageSize: 200 }, { signal }), []);
  const entries = log.data?.entries ?? [];
  return (
    <section>
      <nav class="crumbs">
        <a href="#/">Jobs</a> / <span>Audit</span>
      </nav>
      <h1>Audit trail</h1>
      <Problem polled={log} />
      {log.data && entries.length === 0 && <p class="muted">No actions yet.</p>}
      {entries.length > 0 && (
        <table data-testid="audit">
          <thead>
            <tr>
              <th>When</th>
              <th>Who</th>
              <th>Action</th>
              <th>Project</th>
              <th>Job / phase</th>
              <th>Target</th>
              <th>Outcome</th>
              <th>Detail</th>
            </tr>
          </thead>
          <tbody>
            {entries.map((e) => (
              <tr key={String(e.entryId)}>
                <td>{when(e.time)}</td>
                <td>{e.principal}</td>
                <td>{e.action}</td>
                <td>{e.projectId}</td>
                <td>{e.jobId ? <a href={href("jobs", e.jobId, ...(e.phaseId ? ["phases", e.phaseId] : []))}>{e.phaseId ? `${e.jobId}/${e.phaseId}` : e.jobId}</a> : "–"}</td>
                <td>{e.target || "–"}</td>
                <td class={e.outcome === "OK" ? "ok" : "bad"}>{e.outcome}</td>
                <td>{e.detail}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

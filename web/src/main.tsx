/** The dashboard's entry point: a hash router over the six views. */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import "./app.css";
import { CostsView } from "./views/costs.js";
import { JobsView, JobView } from "./views/jobs.js";
import { CompareView } from "./views/fork.js";
import { PhaseView } from "./views/phase.js";
import { WebhooksView } from "./views/webhooks.js";
import { AuditView } from "./views/audit.js";
import { OfflineNote, WhoAmI } from "./views/common.js";

type Route =
  | { view: "jobs" }
  | { view: "job"; jobId: string }
  | { view: "phase"; jobId: string; phaseId: string }
  | { view: "compare"; jobId: string; left: string; right: string }
  | { view: "costs"; params: URLSearchParams }
  | { view: "webhooks" }
  | { view: "audit" };

export function parseRoute(hash: string): Route {
  const [path, query = ""] = hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "costs") return { view: "costs", params: new URLSearchParams(query) };
  if (parts[0] === "webhooks") return { view: "webhooks" };
  if (parts[0] === "audit") return { view: "audit" };
  if (parts[0] === "jobs" && parts[1] && parts[2] === "phases" && parts[3]) return { view: "phase", jobId: parts[1], phaseId: parts[3] };
  if (parts[0] === "jobs" && parts[1] && parts[2] === "compare" && parts[3] && parts[4]) return { view: "compare", jobId: parts[1], left: parts[3], right: parts[4] };
  if (parts[0] === "jobs" && parts[1]) return { view: "job", jobId: parts[1] };
  return { view: "jobs" };
}

function App() {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const onChange = () => setHash(location.hash);
    addEventListener("hashchange", onChange);
    return () => removeEventListener("hashchange", onChange);
  }, []);
  const route = parseRoute(hash);
  return (
    <>
      <header>
        <a class="brand" href="#/">
          Helix Runner
        </a>
        <nav>
          <a href="#/" class={route.view === "jobs" ? "active" : ""}>
            Jobs
          </a>
          <a href="#/costs" class={route.view === "costs" ? "active" : ""}>
            Costs
          </a>
          <a href="#/webhooks" class={route.view === "webhooks" ? "active" : ""}>
            Webhooks
          </a>
          <a href="#/audit" class={route.view === "audit" ? "active" : ""}>
            Audit
          </a>
        </nav>
        <OfflineNote />
        <WhoAmI />
      </header>
      <main>
        {route.view === "jobs" && <JobsView />}
        {route.view === "job" && <JobView key={route.jobId} jobId={route.jobId} />}
        {route.view === "phase" && <PhaseView key={`${route.jobId}/${route.phaseId}`} jobId={route.jobId} phaseId={route.phaseId} />}
        {route.view === "compare" && <CompareView key={`${route.jobId}/${route.left}/${route.right}`} jobId={route.jobId} left={route.left} right={route.right} />}
        {route.view === "costs" && <CostsView params={route.params} />}
        {route.view === "webhooks" && <WebhooksView />}
        {route.view === "audit" && <AuditView />}
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);

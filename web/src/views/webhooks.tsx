/**
 * Webhooks: the subscriptions (never their secrets) and the delivery log, newest first, with each
 * delivery's attempts (status code, latency, error). Read with ListWebhooks and
 * ListWebhookDeliveries, refreshed every 2 seconds; subscriptions are made with the API or
 * `helix-runner webhooks create`.
 */
import { useState } from "preact/hooks";
import { client } from "../api.js";
import {
  WebhookDeliveryState,
  WebhookDeliveryStateSchema,
  WebhookEventType,
  WebhookEventTypeSchema,
  enumName,
  type Webhook,
  type WebhookDelivery,
} from "../proto.js";
import { ms } from "../reducer.js";
import { href, statusName, usePoll, when } from "../util.js";
import { Problem } from "./common.js";

const STATE_FILTERS: Record<string, WebhookDeliveryState[]> = {
  all: [],
  pending: [WebhookDeliveryState.PENDING],
  dead: [WebhookDeliveryState.DEAD],
  delivered: [WebhookDeliveryState.DELIVERED],
};

/** `PHASE_AWAITING_APPROVAL` → `phase.awaiting_approval`, the body's `type`. */
export function eventName(event: WebhookEventType): string {
  return enumName(WebhookEventTypeSchema, event).replace(/^WEBHOOK_EVENT_TYPE_/, "").toLowerCase().replace("_", ".");
}

function stateClass(state: WebhookDeliveryState): string {
  switch (state) {
    case WebhookDeliveryState.DELIVERED:
      return "ok";
    case WebhookDeliveryState.DEAD:
      return "bad";
    case WebhookDeliveryState.PENDING:
      return "wait";
    default:
      return "off";
  }
}

export function WebhooksView() {
  const [filter, setFilter] = useState("all");
  const [open, setOpen] = useState<string | undefined>(undefined);
  const hooks = usePoll((signal) => client.listWebhooks({}, { signal }), []);
  const log = usePoll(
    (signal) => client.listWebhookDeliveries({ states: STATE_FILTERS[filter], pageSize: 100 }, { signal }),
    [filter],
  );
  return (
    <section>
      <nav class="crumbs">
        <a href="#/">Jobs</a> / <span>Webhooks</span>
      </nav>
      <h1>Webhooks</h1>
      <Problem polled={hooks} />
      <table class="grid" data-testid="webhooks">
        <thead>
          <tr>
            <th>Webhook</th>
            <th>Project</th>
            <th>Events</th>
            <th>Filter</th>
            <th>URL</th>
            <th>State</th>
          </tr>
        </thead>
        <tbody>
          {(hooks.data?.webhooks ?? []).map((w) => (
            <HookRow hook={w} />
          ))}
          {hooks.data && hooks.data.webhooks.length === 0 && (
            <tr>
              <td colSpan={6} class="empty">
                No webhooks. Create one with <code>helix-runner webhooks create</code> or CreateWebhook.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <div class="toolbar">
        <h2>Deliveries</h2>
        <label>
          Show{" "}
          <select value={filter} onChange={(e) => setFilter(e.currentTarget.value)} data-testid="delivery-filter">
            {Object.keys(STATE_FILTERS).map((k) => (
              <option value={k}>{k}</option>
            ))}
          </select>
        </label>
      </div>
      <Problem polled={log} />
      <table class="grid compact" data-testid="deliveries">
        <thead>
          <tr>
            <th>Delivery</th>
            <th>Event</th>
            <th>Phase</th>
            <th class="num">Seq</th>
            <th>State</th>
            <th class="num">Tries</th>
            <th>Last answer</th>
            <th class="num">Latency</th>
            <th>When</th>
          </tr>
        </thead>
        <tbody>
          {(log.data?.deliveries ?? []).map((d) => (
            <DeliveryRows d={d} open={open === d.deliveryId} toggle={() => setOpen(open === d.deliveryId ? undefined : d.deliveryId)} />
          ))}
          {log.data && log.data.deliveries.length === 0 && (
            <tr>
              <td colSpan={9} class="empty">
                No deliveries.
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </section>
  );
}

function HookRow({ hook }: { hook: Webhook }) {
  const filters = [...hook.statuses.map((s) => statusName(s))];
  if (hook.costThresholdUsd !== undefined) filters.push(`≥ $${hook.costThresholdUsd}`);
  return (
    <tr data-testid="webhook-row">
      <td>
        {hook.webhookId}
        {hook.fromConfig && <span class="muted"> (config)</span>}
      </td>
      <td>{hook.projectId || "all"}</td>
      <td>{hook.events.map(eventName).join(", ")}</td>
      <td>{filters.join(", ") || "–"}</td>
      <td class="wrap">{hook.url}</td>
      <td>
        {hook.disabledTime ? (
          <span class="badge bad" title={hook.disabledReason}>
            disabled
          </span>
        ) : (
          <span class="badge ok">enabled</span>
        )}
      </td>
    </tr>
  );
}

function latency(d: { latency?: { seconds: bigint; nanos: number } }): string {
  if (!d.latency) return "–";
  return `${Math.round(Number(d.latency.seconds) * 1000 + d.latency.nanos / 1e6)} ms`;
}

function DeliveryRows({ d, open, toggle }: { d: WebhookDelivery; open: boolean; toggle: () => void }) {
  const last = d.attempts[d.attempts.length - 1];
  const answer = last ? (last.statusCode ? String(last.statusCode) : last.error) : "–";
  const rows = [
    <tr data-testid="delivery-row" onClick={toggle} class="clickable">
      <td>
        <code>{d.deliveryId}</code>
      </td>
      <td>{eventName(d.event)}</td>
      <td>{d.jobId && d.phaseId ? <a href={href("jobs", d.jobId, "phases", d.phaseId)}>{`${d.jobId}/${d.phaseId}`}</a> : d.jobId || "–"}</td>
      <td class="num">{String(d.sequence)}</td>
      <td>
        <span class={`badge ${stateClass(d.state)}`}>{enumName(WebhookDeliveryStateSchema, d.state).replace(/^WEBHOOK_DELIVERY_STATE_/, "")}</span>
      </td>
      <td class="num">{d.attemptCount}</td>
      <td class="wrap">{answer}</td>
      <td class="num">{last ? latency(last) : "–"}</td>
      <td>{when(last?.time ?? d.createTime)}</td>
    </tr>,
  ];
  if (open) {
    for (const a of d.attempts) {
      rows.push(
        <tr class="sub" data-testid="attempt-row">
          <td colSpan={5} class="muted">
            try {a.attempt}
            {a.replicaId ? ` on ${a.replicaId}` : ""}
          </td>
          <td />
          <td class="wrap">{a.statusCode ? String(a.statusCode) : a.error}</td>
          <td class="num">{latency(a)}</td>
          <td>{when(a.time)}</td>
        </tr>,
      );
    }
    if (d.state === WebhookDeliveryState.PENDING && d.nextAttemptTime) {
      const t = ms(d.nextAttemptTime);
      rows.push(
        <tr class="sub">
          <td colSpan={9} class="muted">
            next try {t !== undefined ? new Date(t).toLocaleString() : "–"}
          </td>
        </tr>,
      );
    }
    rows.push(
      <tr class="sub">
        <td colSpan={9}>
          <pre class="body">{d.body}</pre>
        </td>
      </tr>,
    );
  }
  return <>{rows}</>;
}

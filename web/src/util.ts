/** Small hooks and formatters shared by the views. */
import { useEffect, useRef, useState } from "preact/hooks";
import { describeError, isAbort, isUnauthenticated } from "./api.js";
import { PhaseStatus } from "./proto.js";
import { ms, statusName } from "./reducer.js";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

export interface Polled<T> {
  data: T | undefined;
  error: string | undefined;
  unauthenticated: boolean;
}

/**
 * Calls `load` now and every `intervalMs` (the jobs list and job view follow status changes this
 * way; a phase's own events are streamed). A change of `deps` restarts it.
 */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], intervalMs = 2000): Polled<T> {
  const [state, setState] = useState<Polled<T>>({ data: undefined, error: undefined, unauthenticated: false });
  useEffect(() => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const tick = async () => {
      try {
        const data = await load(controller.signal);
        if (!controller.signal.aborted) setState({ data, error: undefined, unauthenticated: false });
      } catch (error) {
        if (controller.signal.aborted || isAbort(error)) return;
        setState((s) => ({ data: s.data, error: describeError(error), unauthenticated: isUnauthenticated(error) }));
      }
      if (!controller.signal.aborted) timer = setTimeout(tick, intervalMs);
    };
    void tick();
    return () => {
      controller.abort();
      clearTimeout(timer);
    };
  }, deps);
  return state;
}

/** The current time, refreshed every `intervalMs` while `active`. */
export function useNow(active: boolean, intervalMs = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!active) return;
    const id = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(id);
  }, [active, intervalMs]);
  return now;
}

/** The previous value of `value` (for effects that react to a change). */
export function usePrevious<T>(value: T): T | undefined {
  const ref = useRef<T | undefined>(undefined);
  useEffect(() => {
    ref.current = value;
  });
  return ref.current;
}

export { money, plural, reportedTotal, sumKnown, usd } from "./format.js";

export function duration(msValue: number): string {
  const s = Math.floor(msValue / 1000);
  if (s < 60) return `${(msValue / 1000).toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

export function when(ts: Timestamp | undefined): string {
  const t = ms(ts);
  return t === undefined ? "–" : new Date(t).toLocaleString();
}

export function clock(msValue: number): string {
  const d = new Date(msValue);
  return `${d.toLocaleTimeString([], { hour12: false })}.${String(d.getMilliseconds()).padStart(3, "0")}`;
}

/** CSS class of a status badge. */
export function statusClass(status: PhaseStatus): string {
  switch (status) {
    case PhaseStatus.SUCCEEDED:
      return "ok";
    case PhaseStatus.FAILED:
    case PhaseStatus.TIMED_OUT:
    case PhaseStatus.INCOMPLETE:
      return "bad";
    case PhaseStatus.CANCELLED:
    case PhaseStatus.INTERRUPTED:
      return "off";
    case PhaseStatus.PAUSING:
    case PhaseStatus.PAUSED:
    case PhaseStatus.AWAITING_APPROVAL:
      return "wait";
    case PhaseStatus.RUNNING:
    case PhaseStatus.PENDING:
      return "live";
    default:
      return "off";
  }
}

export { statusName };

export function href(...parts: string[]): string {
  return "#/" + parts.map(encodeURIComponent).join("/");
}

/** Chart.js (a maintained charting library) behind one small Preact component. */
import {
  BarController,
  BarElement,
  CategoryScale,
  Chart,
  Legend,
  LineController,
  LineElement,
  LinearScale,
  PointElement,
  Tooltip,
  type ChartConfiguration,
} from "chart.js";
import { useEffect, useRef } from "preact/hooks";

Chart.register(BarController, BarElement, CategoryScale, LinearScale, LineController, LineElement, PointElement, Tooltip, Legend);
Chart.defaults.font.family = "system-ui, -apple-system, 'Segoe UI', sans-serif";
Chart.defaults.color = "#475569";
// Live data redraws often; animations would only blur it (and make screenshots nondeterministic).
Chart.defaults.animation = false;

export const COLORS = {
  running: "#3b82f6",
  held: "#f59e0b",
  succeeded: "#16a34a",
  failed: "#dc2626",
  denied: "#ea580c",
  unfinished: "#94a3b8",
  computed: "#6366f1",
  reported: "#0ea5e9",
};

interface Props {
  config: ChartConfiguration;
  testid: string;
  height: number;
  label: string;
}

/**
 * A canvas chart that keeps one Chart instance and swaps its data on every render. After each
 * draw, `data-drawn` holds how many elements the chart drew (bars or points), so a test in a real
 * browser can tell a rendered chart from an empty canvas.
 */
export function ChartCanvas({ config, testid, height, label }: Props) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const chart = useRef<Chart | undefined>(undefined);
  useEffect(() => {
    const c = new Chart(canvas.current!, { ...config, options: { ...config.options, maintainAspectRatio: false, responsive: true } });
    chart.current = c;
    markDrawn(c);
    return () => {
      c.destroy();
      chart.current = undefined;
    };
  }, [config.type]);
  useEffect(() => {
    const c = chart.current;
    if (!c) return;
    c.data = config.data;
    c.options = { ...config.options, maintainAspectRatio: false, responsive: true };
    c.update("none");
    markDrawn(c);
  }, [config]);
  return (
    <div class="chart" style={{ height: `${height}px` }}>
      <canvas ref={canvas} data-testid={testid} role="img" aria-label={label} />
    </div>
  );
}

function markDrawn(c: Chart): void {
  let drawn = 0;
  c.data.datasets.forEach((_, i) => {
    if (c.isDatasetVisible(i)) drawn += c.getDatasetMeta(i).data.length;
  });
  c.canvas.dataset.drawn = String(drawn);
}

"""`helix-runner attach` under load: is the dashboard responsive while a phase streams fast?

A real server (``helix-runner serve``) runs a fake ``claude`` (the one of bench_run_phase.py) that
writes ``assistant`` text lines at R lines/s, each carrying its write time. The dashboard runs in
this process exactly as ``attach`` builds it (``cli.attach.build_dashboard``: WatchPhase over the
Python client, betterproto2 decoding, the view model, Textual rendering), headless through
Textual's pilot at 160x50. Its key handler is swapped for a recorder, so a key costs no RPC.

Measured per rate:
* key latency: a key handed to the driver every 200 ms (as the terminal's input thread does) -> its
  action running;
* ingest lag: the child's write of a line -> the dashboard folding its event into the view;
* events folded per second, CPU of this process per second of wall time, log lines not shown.

``--all-lines`` also runs each rate with the log throttle off (every event written to the log
on every redraw), the baseline the throttle exists for.

Usage: .venv/bin/python benchmarks/bench_attach.py [--rates 100,1000,2000] [--seconds 8] [--all-lines]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_run_phase import parse_text, pct, write_fake_claude
from server_process import ServerProcess


class Recorder:
    """Stands in for the dashboard's controller: notes when each key's action ran."""

    def __init__(self):
        self.times: list[float] = []

    async def pause(self, hard: bool) -> str:
        self.times.append(time.perf_counter())
        return ""

    async def inspect(self):
        return None

    def describe_error(self, exc: BaseException) -> str:
        return str(exc)


class Stamped:
    """Wraps the dashboard's source: the time each text event is handed to the view."""

    def __init__(self, source):
        self.source = source
        self.lags_ms: list[float] = []
        self.folded_at: list[float] = []

    @property
    def result(self):
        return self.source.result

    async def __aiter__(self):
        async for event in self.source:
            now = time.time_ns()
            self.folded_at.append(time.perf_counter())
            if event.assistant_text is not None and event.assistant_text.text.startswith("bench "):
                _, written = parse_text(event.assistant_text.text)
                self.lags_ms.append((now - written) / 1e6)
            yield event


async def one_rate(address: str, workdir: Path, rate: int, seconds: float, all_lines: bool, tag: str) -> dict:
    from helix_runner_client import RunnerClient, pb
    from textual import events

    from helix_runner.cli import dashboard
    from helix_runner.cli.attach import build_dashboard

    dashboard.LOG_LINES_PER_TICK = 10**9 if all_lines else 60
    lines = int(rate * seconds)
    async with RunnerClient(address) as client:
        request = pb.RunPhaseRequest(
            job_id=tag,
            phase_id="p",
            prompt="bench",
            working_dir=str(workdir),
            options=pb.PhaseOptions(
                on_disconnect=pb.OnDisconnect.DETACH,
                env={"HELIX_BENCH_LINES": str(lines), "HELIX_BENCH_RATE": str(rate)},
            ),
        )
        run = client.run_phase(request)
        async for _ in run:  # started: leave it running detached
            break
        run.cancel()
        app = await build_dashboard(client, tag, "p")
        recorder = Recorder()
        app.control = recorder
        app.source = stamped = Stamped(app.source)
        skipped = 0
        original_write = None

        presses: list[float] = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with app.run_test(size=(160, 50)) as pilot:
            log = app.query_one("#log")
            original_write = log.write

            def counting_write(content, *a, **kw):
                nonlocal skipped
                text = str(content)
                if text.startswith("… ") and "events not shown" in text:
                    skipped += int(text.split()[1])
                return original_write(content, *a, **kw)

            log.write = counting_write
            while not app.ended:
                await asyncio.sleep(0.2)
                # As a terminal's input thread does: hand the key to the driver and go on.
                key = events.Key("p", "p")
                key.set_sender(app)
                presses.append(time.perf_counter())
                app._driver.send_message(key)
            await pilot.pause(0.5)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    latencies = sorted(
        (done - pressed) * 1000 for pressed, done in zip(presses, recorder.times, strict=False)
    )
    lags = sorted(stamped.lags_ms[len(stamped.lags_ms) // 10 :])  # past the first 10 %: the initial catch-up
    span = (stamped.folded_at[-1] - stamped.folded_at[0]) if len(stamped.folded_at) > 1 else float("nan")
    return {
        "rate": rate,
        "all_lines": all_lines,
        "events": app.view.events,
        "keys": len(latencies),
        "key_p50": pct(latencies, 50),
        "key_p95": pct(latencies, 95),
        "key_max": latencies[-1] if latencies else 0,
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "lag_max": lags[-1] if lags else 0,
        "folded_per_s": len(stamped.folded_at) / span if span else float("nan"),
        "cpu_per_wall": cpu / wall,
        "skipped": skipped,
        "lag_mean": statistics.fmean(lags) if lags else float("nan"),
    }


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-attach-") as tmp_name:
        tmp = Path(tmp_name)
        workdir = tmp / "work"
        workdir.mkdir()
        server = ServerProcess(tmp, "attach", write_fake_claude(tmp), workdir)
        try:
            rows = []
            for i, rate in enumerate(int(r) for r in args.rates.split(",")):
                for all_lines in (False, True) if args.all_lines else (False,):
                    rows.append(
                        await one_rate(
                            server.address,
                            workdir,
                            rate,
                            args.seconds,
                            all_lines,
                            f"bench-{i}-{int(all_lines)}",
                        )
                    )
                    print_row(rows[-1])
        finally:
            server.stop()


def print_row(r: dict) -> None:
    mode = "all lines" if r["all_lines"] else "throttled"
    print(
        f"{r['rate']:>5} ev/s {mode:>9}: {r['events']:>6} events, folded {r['folded_per_s']:7.0f}/s | "
        f"key ms p50 {r['key_p50']:6.1f} p95 {r['key_p95']:6.1f} max {r['key_max']:6.1f} ({r['keys']} keys) | "
        f"lag ms p50 {r['lag_p50']:7.1f} p99 {r['lag_p99']:7.1f} max {r['lag_max']:7.1f} | "
        f"cpu {r['cpu_per_wall']:.2f} | log lines not shown {r['skipped']}",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="100,1000,2000")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--all-lines", action="store_true")
    asyncio.run(main(parser.parse_args(sys.argv[1:])))

"""Throughput of the stream engine (raw stdout bytes → typed events, tool tracking, costs).

Replays the real CLI transcripts of the corpus (``real/*.jsonl``, CLI stdout only) many times and
runs, side by side in one process on the same lines:

* ``bare orjson``  — ``orjson.loads`` over the pre-split lines: the limit for any Python parser;
* ``claude-agent-sdk`` — the official SDK's own read path on 64 KiB chunks: incremental UTF-8
  decode (as anyio's ``TextReceiveStream`` does), its ``_LineFramer``, ``_parse_stdout_line``
  (``json.loads``) and ``message_parser.parse_message``: the peer;
* ``helix PhaseStream`` — ours: ``PhaseStream.feed`` on 64 KiB chunks (framing, parsing, typed
  events, tool pairing and statistics, cost ledger), a fresh stream per replay, then ``finish``.

Memory mode (``--gb-memory``) streams about 1 GB, generated on the fly from the corpus with unique
tool and message ids per replay (nothing is written to disk), through one ``PhaseStream`` and
prints the process RSS at intervals; it must stay flat.

Usage: .venv/bin/python benchmarks/bench_stream_engine.py [--seconds N] [--clock wall|cpu]
       [--gb-memory] [--corpus DIR] [--transcripts GLOB] [--json FILE]
"""

from __future__ import annotations

import argparse
import codecs
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "server"))

from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions  # noqa: E402
from helix_runner.domain.pricing import PriceTable  # noqa: E402

CHUNK = 64 * 1024


def corpus_dir(explicit: str | None) -> Path:
    """The corpus's ``real/``: --corpus, else the full corpus where the tests look for it
    ($HELIX_CORPUS_DIR, else <repo>/../shared/corpus), else the vendored subset in tests/fixtures/."""
    if explicit:
        real = Path(explicit) / "real"
        if not real.is_dir():
            sys.exit(f"corpus not found: looked for {real}")
        return real
    for base in (os.environ.get("HELIX_CORPUS_DIR"), REPO_ROOT.parent / "shared" / "corpus"):
        if base and (Path(base) / "real").is_dir():
            return Path(base) / "real"
    real = REPO_ROOT / "tests" / "fixtures" / "corpus" / "real"
    print(f"full corpus not found; using the vendored subset {real} (MB/s not comparable)", file=sys.stderr)
    return real


# Which transcripts of real/ to replay (--transcripts); "*partial*" keeps the captures made with
# --include-partial-messages, whose lines are mostly stream_event deltas.
TRANSCRIPTS = "*.jsonl"


def load_stream(real: Path, pattern: str = TRANSCRIPTS) -> bytes:
    """The CLI stdout transcripts concatenated (driver wrappers and stdin logs excluded)."""
    files = sorted(p for p in real.glob(pattern) if not p.name.endswith((".both.jsonl", ".stdin.jsonl")))
    if not files:
        sys.exit(f"no transcript matches {pattern} in {real}")
    return b"".join(p.read_bytes() for p in files)


def chunks(data: bytes, size: int = CHUNK) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


# ------------------------------------------------------------------------------------------------
# The three contenders. Each processes the whole corpus once per call.


def make_bare(data: bytes) -> Callable[[], int]:
    lines = data.split(b"\n")[:-1]
    loads = orjson.loads

    def run() -> int:
        for line in lines:
            loads(line)
        return len(lines)

    return run


def make_sdk(data: bytes) -> Callable[[], int]:
    from claude_agent_sdk._internal.message_parser import parse_message
    from claude_agent_sdk._internal.transport.subprocess_cli import _LineFramer, _parse_stdout_line

    parts = chunks(data)
    max_buffer = 64 * 1024 * 1024  # same cap as ours (the SDK's default is 1 MiB)

    def guard(length: int) -> None:  # the SDK's per-line size check (_read_messages_impl)
        if length > max_buffer:
            raise ValueError("message too large")

    def run() -> int:
        decoder = codecs.getincrementaldecoder("utf-8")()  # what anyio's TextReceiveStream does
        framer = _LineFramer()
        version_checked = False
        n = 0
        for part in parts:
            for line in framer.push(decoder.decode(part)):
                guard(len(line))
                message = _parse_stdout_line(line)
                if message is not None:
                    # _check_claude_version's per-message test (the first init only goes further)
                    if not version_checked and (message.get("type"), message.get("subtype")) == (
                        "system",
                        "init",
                    ):
                        version_checked = True
                    parse_message(message)
                    n += 1
            guard(framer.pending_len)
        return n

    return run


def make_ours(data: bytes) -> Callable[[], int]:
    parts = chunks(data)
    prices = PriceTable()  # shared like the service shares it across phases
    options = PhaseStreamOptions(include_partial_messages=True)

    def run() -> int:
        stream = PhaseStream(options, price_table=prices)
        n = 0
        for part in parts:
            n += len(stream.feed(part))
        n += len(stream.finish())
        if stream.parse_error_count:
            raise SystemExit(f"unexpected parse errors: {stream.parse_error_count}")
        return n

    return run


# The goals of the performance issue (P1): ours at least this many times the SDK and the bare loop.
GOAL_VS_SDK = 2.0
GOAL_VS_BARE = 0.6


def throughput(seconds: float, real: Path, clock: str = "wall", pattern: str = TRANSCRIPTS) -> dict:
    """Interleave the contenders replay by replay (a noisy machine then slows all of them alike).

    Each round runs every contender once, starting with a different one each round (no contender
    always runs right after the same other one). ``clock="cpu"`` times with the process's CPU time
    instead of wall time: on a shared machine, time spent descheduled then counts for nobody.
    Prints the table and returns the figures (for ``--json`` and ``run_all.py``).
    """
    data = load_stream(real, pattern)
    n_lines = data.count(b"\n")
    contenders = [
        ("bare orjson.loads loop (limit)", make_bare(data)),
        ("claude-agent-sdk parser (peer)", make_sdk(data)),
        ("helix PhaseStream (ours)", make_ours(data)),
    ]
    now = time.process_time if clock == "cpu" else time.perf_counter
    print(
        f"corpus: {real / pattern} ({len(data) / 1e6:.2f} MB, {n_lines} lines per replay); {seconds:g} s per "
        f"contender, interleaved, {clock} clock"
    )
    for _, run in contenders:  # warm-up
        run()
    gc.collect()
    times: list[list[float]] = [[] for _ in contenders]
    order = list(range(len(contenders)))
    while sum(times[2]) < seconds:
        for i in order:
            run = contenders[i][1]
            start = now()
            run()
            times[i].append(now() - start)
        order.append(order.pop(0))  # rotate: the next round starts with the next contender
    rounds = len(times[0])
    print()
    print(f"| {'contender':<32} | {'replays':>7} | {'MB/s':>8} | {'lines/s':>10} |")
    print(f"|{'-' * 34}|{'-' * 9}|{'-' * 10}|{'-' * 12}|")
    summary: dict = {
        "corpus": str(real / pattern),
        "corpus_mb": len(data) / 1e6,
        "lines": n_lines,
        "replays": rounds,
        "clock": clock,
        "contenders": {},
    }
    for (name, _), spent in zip(contenders, times, strict=True):
        total = sum(spent)
        mb_s = len(data) * rounds / total / 1e6
        print(f"| {name:<32} | {rounds:>7} | {mb_s:>8.1f} | {n_lines * rounds / total:>10,.0f} |")
        summary["contenders"][name] = {"mb_per_s": mb_s, "median_replay_s": statistics.median(spent)}
    # Ratios: median over rounds of the per-round speed ratio (robust to a machine that drifts),
    # with the interquartile range of the per-round ratios to show the noise.
    print()
    for key, label, other, goal in (("vs_sdk", "SDK ", 1, GOAL_VS_SDK), ("vs_bare", "bare", 0, GOAL_VS_BARE)):
        ratios = sorted(t / o for t, o in zip(times[other], times[2], strict=True))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        median = statistics.median(ratios)
        print(f"ours / {label} = {median:.2f}x   (goal >= {goal:g}x; per-round IQR {q1:.2f}-{q3:.2f})")
        summary[key] = {"median": median, "q1": q1, "q3": q3, "goal": goal}
    return summary


# ------------------------------------------------------------------------------------------------
# Memory mode.


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError):
        return 0.0


def replays(data: bytes, total_bytes: int) -> Iterator[bytes]:
    """The corpus again and again with ids made unique per replay, until ``total_bytes``."""
    produced = 0
    n = 0
    while produced < total_bytes:
        tag = b"%x_" % n
        blob = data.replace(b"toolu_", b"toolu_" + tag).replace(b"msg_", b"msg_" + tag)
        yield from chunks(blob)
        produced += len(blob)
        n += 1


def memory(real: Path, gigabytes: float = 1.0, pattern: str = TRANSCRIPTS) -> None:
    data = load_stream(real, pattern)
    total = int(gigabytes * 1e9)
    stream = PhaseStream(PhaseStreamOptions(include_partial_messages=True))
    print(f"streaming {total / 1e9:.2f} GB through one PhaseStream; RSS every ~100 MB")
    print(f"| {'fed (MB)':>9} | {'events':>11} | {'RSS (MB)':>9} |")
    print(f"|{'-' * 11}|{'-' * 13}|{'-' * 11}|")
    next_report = 0
    events = 0
    start = time.perf_counter()
    readings = []
    for part in replays(data, total):
        events += len(stream.feed(part))
        if stream.stdout_bytes >= next_report:
            rss = rss_mb()
            readings.append(rss)
            print(f"| {stream.stdout_bytes / 1e6:>9.0f} | {events:>11,} | {rss:>9.1f} |")
            next_report += 100_000_000
    events += len(stream.finish())
    elapsed = time.perf_counter() - start
    rss = rss_mb()
    print(f"| {stream.stdout_bytes / 1e6:>9.0f} | {events:>11,} | {rss:>9.1f} |")
    print()
    warm = readings[1:]  # while streaming, after the first 100 MB (the bounded windows are full by then)
    print(
        f"{stream.stdout_bytes / 1e9:.2f} GB in {elapsed:.0f} s ({stream.stdout_bytes / elapsed / 1e6:.0f} MB/s); "
        f"RSS while streaming after the first 100 MB: min {min(warm):.1f} MB, max {max(warm):.1f} MB "
        f"(spread {max(warm) - min(warm):.1f} MB), {rss:.1f} MB after finish(); "
        f"retained tool calls {len(stream.tools.calls)}, results kept {len(stream.results)} of "
        f"{stream.result_count}, parse errors {stream.parse_error_count}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per contender")
    parser.add_argument("--gb-memory", action="store_true", help="stream ~1 GB and print RSS instead")
    parser.add_argument("--gigabytes", type=float, default=1.0, help="size of the memory run")
    parser.add_argument(
        "--corpus",
        help="corpus directory holding real/ (default: $HELIX_CORPUS_DIR, else ../shared/corpus, "
        "else the vendored tests/fixtures/corpus)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="time replays by wall clock (default) or by this process's CPU time (shared machines)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the throughput figures as JSON")
    parser.add_argument(
        "--transcripts",
        default=TRANSCRIPTS,
        metavar="GLOB",
        help="which transcripts of real/ to replay (default: all; '*partial*': mostly stream_event lines)",
    )
    args = parser.parse_args()
    real = corpus_dir(args.corpus)
    if args.gb_memory:
        memory(real, args.gigabytes, args.transcripts)
    else:
        summary = throughput(args.seconds, real, args.clock, args.transcripts)
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()

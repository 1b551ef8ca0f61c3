"""The floor under P5: bare grpc.aio fanning pre-encoded messages out to W streams, nothing else.

A minimal grpc.aio server (no store, no parsing, no interceptors) holds W server-streaming calls;
at R messages/s it wakes every stream's handler (one ``asyncio.Event`` each, as the event log
does) and each yields the same pre-built bytes (a time stamp + padding). A client in another
process reads the W streams raw, like ``bench_job_control.py``'s fan-out client. Prints the
delivery latency and the server's CPU per delivered message: what any grpc.aio server on this
machine pays, however little it does per event.

    .venv/bin/python benchmarks/bench_grpc_floor.py [--watchers 200] [--rate 50] [--seconds 8] [--channels 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

METHOD = "/floor.Floor/Watch"


async def serve(cfg: dict) -> None:
    import grpc

    watchers, rate, seconds = cfg["watchers"], cfg["rate"], cfg["seconds"]
    events: list[asyncio.Event] = []
    queues: list[list[bytes]] = []
    done = asyncio.Event()
    ready = asyncio.Event()

    async def watch(request, context):
        wake, queue = asyncio.Event(), []
        events.append(wake)
        queues.append(queue)
        if len(events) == watchers:
            ready.set()
        while True:
            await wake.wait()
            wake.clear()
            if queue:  # behind: what queued meanwhile goes as one message, as the event log does
                message = b"".join(queue)
                queue.clear()
                yield message
            elif done.is_set():
                return

    handler = grpc.method_handlers_generic_handler(
        "floor.Floor",
        {
            "Watch": grpc.unary_stream_rpc_method_handler(
                watch, request_deserializer=None, response_serializer=None
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"port": port}), flush=True)
    await ready.wait()
    await asyncio.sleep(0.5)
    cpu0, t0 = time.process_time(), time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        delay = t0 + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        message = struct.pack("<q", time.time_ns()) + b"p" * 200
        for wake, queue in zip(events, queues, strict=True):
            queue.append(message)
            wake.set()
    await asyncio.sleep(0.5)
    cpu = time.process_time() - cpu0 - 0.0
    done.set()
    for wake in events:
        wake.set()
    print(json.dumps({"server_cpu_s": cpu, "messages": n * watchers}), flush=True)
    await asyncio.sleep(0.5)
    await server.stop(1)


async def client(cfg: dict, port: int) -> dict:
    import grpc

    watchers, channels = cfg["watchers"], cfg["channels"] or cfg["watchers"]
    chans = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("helix.floor.ch", i)])
        for i in range(channels)
    ]
    lat: list[int] = []
    messages = [0]
    cpu0 = time.process_time()

    async def read(k: int) -> None:
        call = chans[k % channels].unary_stream(METHOD, request_serializer=None, response_deserializer=None)(
            b""
        )
        async for raw in call:  # the stamps of every message joined in it
            now = time.time_ns()
            messages[0] += 1
            lat.extend(now - struct.unpack_from("<q", raw, off)[0] for off in range(0, len(raw), 208))

    tasks = [asyncio.create_task(read(k)) for k in range(watchers)]
    await asyncio.gather(*tasks, return_exceptions=True)
    lat.sort()

    def pick(p: float) -> float:
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] / 1e6

    return {
        "n": len(lat),
        "p50": pick(50),
        "p99": pick(99),
        "max": lat[-1] / 1e6 if lat else 0.0,
        "client_cpu_s": time.process_time() - cpu0,
        "messages": messages[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watchers", type=int, default=200)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--channels", type=int, default=0, help="client connections (0: one per watcher)")
    ap.add_argument("--server", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cfg = {"watchers": args.watchers, "rate": args.rate, "seconds": args.seconds, "channels": args.channels}
    if args.server:
        asyncio.run(serve(json.loads(args.server)))
        return
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--server", json.dumps(cfg)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = json.loads(proc.stdout.readline())["port"]
        out = asyncio.run(client(cfg, port))
        srv = json.loads(proc.stdout.readline())
    finally:
        proc.wait(10)
    per = srv["server_cpu_s"] / max(1, srv["messages"]) * 1e6
    print(
        f"bare grpc.aio fan-out: W={args.watchers} at {args.rate:g}/s for {args.seconds:g} s, "
        f"{args.channels or args.watchers} client connections, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  delivered {out['n']} events in {out['messages']} messages, latency p50 {out['p50']:.2f} ms, p99 {out['p99']:.2f} ms, max {out['max']:.2f} ms"
    )
    print(
        f"  server CPU {srv['server_cpu_s']:.2f} s = {per:.1f} µs per delivered event; "
        f"client CPU {out['client_cpu_s']:.2f} s = {out['client_cpu_s'] / max(1, out['n']) * 1e6:.1f} µs"
    )


if __name__ == "__main__":
    main()

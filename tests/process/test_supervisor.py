"""Process supervision against fake children that produce faults the real CLI cannot be made to.

Each case must end in bounded time with the true end cause and the whole process group gone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.processes import CollectingSink, alive

from helix_runner.domain.phase_outcome import EndCause
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


FAST = ProcessLimits(timeout=20, idle_timeout=10, exit_grace=1, kill_grace=1)


async def _run(tmp_path, body, *, limits=FAST,
               stdin_lines=(), keep_stdin_open=False):
    sink = CollectingSink()
    sup = ProcessSupervisor(_script(tmp_path, body), cwd=tmp_path, env=dict(os.environ), sink=sink, limits=limits,
                            stdin_lines=stdin_lines, keep_stdin_open=keep_stdin_open)
    return sup, sink


async def test_normal_exit_delivers_all_output_and_stderr(tmp_path):
    sup, sink = await _run(tmp_path, """
        import sys
        sys.stdout.write('{"a":1}\\n' * 1000); sys.stdout.flush()
        sys.stderr.write("warning: one\\nwarning: two\\n")
        sys.exit(3)
    """)
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.EXITED
    assert result.exit_code == 3 and result.exit_signal is None
    assert result.stdout_eof
    assert bytes(sink.stdout) == b'{"a":1}\n' * 1000
    assert [line for line, _ in sink.stderr] == [b"warning: one", b"warning: two"]
    assert "warning: two" in result.stderr_tail


async def test_stdin_lines_are_written_then_closed(tmp_path):
    sup, sink = await _run(tmp_path, """
        import sys
        data = sys.stdin.read()   # returns only once stdin is closed
        sys.stdout.write("got:" + data)
    """, stdin_lines=[b'{"type":"user"}'])
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.EXITED and result.exit_code == 0
    assert bytes(sink.stdout) == b'got:{"type":"user"}\n'


async def test_timeout_kills_the_group(tmp_path):
    sup, _ = await _run(tmp_path, "import time\nwhile True:\n    print('tick', flush=True); time.sleep(0.05)\n",
                        limits=ProcessLimits(timeout=1, idle_timeout=10, exit_grace=1, kill_grace=1))
    started = time.monotonic()
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.TIMEOUT
    assert result.exit_signal in ("SIGTERM", "SIGKILL")
    assert time.monotonic() - started < 10
    assert not alive(result.pid)


async def test_idle_watchdog_fires_when_the_process_is_silent(tmp_path):
    sup, _ = await _run(tmp_path, "import time\nprint('x', flush=True)\ntime.sleep(60)\n",
                        limits=ProcessLimits(timeout=30, idle_timeout=0.5, exit_grace=1, kill_grace=1))
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.IDLE_TIMEOUT
    assert "no output" in result.detail


async def test_held_watchdog_does_not_fire(tmp_path):
    sup, _ = await _run(tmp_path, "import time\ntime.sleep(1.2)\nprint('done')\n",
                        limits=ProcessLimits(timeout=30, idle_timeout=0.3, exit_grace=1, kill_grace=1))
    sup.hold_watchdog(True)  # e.g. a person is deciding on a held tool call
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.EXITED and result.exit_code == 0


async def test_stdout_closed_while_process_lives(tmp_path):
    sup, sink = await _run(tmp_path, """
        import os, sys, time
        sys.stdout.write('{"type":"system","subtype":"init"}\\n'); sys.stdout.flush()
        os.close(1)
        time.sleep(60)
    """)
    started = time.monotonic()
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.NO_EXIT_AFTER_EOF
    assert result.stdout_eof
    assert result.exit_signal is not None
    assert time.monotonic() - started < 10
    assert sink.stdout.startswith(b'{"type":"system"')


async def test_grandchild_holding_the_pipes_is_killed(tmp_path):
    marker = tmp_path / "grandchild.pid"
    sup, _ = await _run(tmp_path, f"""
        import subprocess, sys
        # Like a Bash tool's background job: inherits stdout/stderr and outlives its parent.
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(marker)!r}, "w").write(str(p.pid))
        print('{{"type":"result"}}', flush=True)
    """)
    started = time.monotonic()
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.PIPES_HELD_AFTER_EXIT
    assert result.exit_code == 0
    assert time.monotonic() - started < 10
    grandchild = int(marker.read_text())
    for _ in range(50):
        if not alive(grandchild):
            break
        await asyncio.sleep(0.1)
    assert not alive(grandchild)


async def test_stop_request_kills_child_and_grandchild(tmp_path):
    marker = tmp_path / "grandchild.pid"
    sup, _ = await _run(tmp_path, f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({str(marker)!r}, "w").write(str(p.pid))
        print("ready", flush=True)
        time.sleep(120)
    """)
    task = asyncio.create_task(sup.run())
    for _ in range(100):
        if marker.exists() and marker.read_text():
            break
        await asyncio.sleep(0.05)
    sup.request_stop(EndCause.CANCELLED)
    result = await asyncio.wait_for(task, 30)
    assert result.cause is EndCause.CANCELLED
    assert not alive(result.pid)
    grandchild = int(marker.read_text())
    for _ in range(50):
        if not alive(grandchild):
            break
        await asyncio.sleep(0.1)
    assert not alive(grandchild)


async def test_crash_mid_line(tmp_path):
    sup, sink = await _run(tmp_path, """
        import os, sys
        sys.stdout.write('{"type":"assistant","message":{"content":[{"type":"te'); sys.stdout.flush()
        os.kill(os.getpid(), 9)
    """)
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.cause is EndCause.EXITED
    assert result.exit_signal == "SIGKILL" and result.exit_code is None
    assert sink.stdout.endswith(b'"type":"te')


async def test_fifty_megabyte_line_streams_in_bounded_chunks(tmp_path):
    sup, sink = await _run(tmp_path, """
        import sys
        sys.stdout.buffer.write(b'{"type":"user","x":"' + b"a" * (50 * 1024 * 1024) + b'"}\\n')
    """)
    result = await asyncio.wait_for(sup.run(), 60)
    assert result.cause is EndCause.EXITED and result.exit_code == 0
    assert result.stdout_bytes == len(sink.stdout) == 50 * 1024 * 1024 + 23
    assert sink.chunks > 100  # delivered incrementally, never as one buffer


async def test_long_stderr_line_is_bounded(tmp_path):
    sup, sink = await _run(tmp_path, "import sys\nsys.stderr.write('e' * 100000 + '\\nshort\\n')\n")
    await asyncio.wait_for(sup.run(), 30)
    assert sink.stderr[0][1] is True and len(sink.stderr[0][0]) == 4096
    assert sink.stderr[-1] == (b"short", False)


async def test_missing_binary_is_reported_not_raised(tmp_path):
    sup = ProcessSupervisor([str(tmp_path / "nope")], cwd=tmp_path, env={}, sink=CollectingSink(), limits=ProcessLimits())
    result = await sup.run()
    assert result.cause is EndCause.SPAWN_FAILED
    assert "cannot start" in result.detail


@pytest.mark.parametrize("hold", [False])
async def test_write_stdin_after_close_returns_false(tmp_path, hold):
    sup, _ = await _run(tmp_path, "import sys\nsys.stdin.read()\n")
    result = await asyncio.wait_for(sup.run(), 30)
    assert result.exit_code == 0
    assert await sup.write_stdin(b"{}") is False


class GatedSink(CollectingSink):
    """A sink whose writes are behind (its ``room`` waits until ``open``): the supervisor must not read on."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()

    async def room(self) -> None:
        await self.open.wait()


async def test_a_sink_without_room_holds_the_reads_and_the_child_blocks_on_its_writes(tmp_path):
    started, done = tmp_path / "started", tmp_path / "wrote-everything"
    sink = GatedSink()
    body = f"""
        import os, sys
        open({str(started)!r}, "w").write(str(os.getpid()))
        sys.stdout.write("x" * 4_000_000); sys.stdout.flush()
        open({str(done)!r}, "w").close()
    """
    sup = ProcessSupervisor(_script(tmp_path, body), cwd=tmp_path, env=dict(os.environ), sink=sink,
                            limits=ProcessLimits(timeout=60, idle_timeout=60))
    run = asyncio.ensure_future(sup.run())

    def blocked_writing() -> bool:  # asleep in the kernel's pipe write (``anon_pipe_write`` on 6.x)
        try:
            return "pipe_write" in Path(f"/proc/{int(started.read_text())}/wchan").read_text()
        except (OSError, ValueError):
            return False

    for _ in range(3000):  # until the child is stuck in its write, or the sink got output (30 s at most)
        if sink.stdout or blocked_writing():
            break
        await asyncio.sleep(0.01)
    # Nothing was handed to the sink, and the child waits in its write: the pipe and the reader's
    # buffer hold a few hundred KiB, not 4 MB.
    assert bytes(sink.stdout) == b"" and blocked_writing() and not done.exists()
    sink.open.set()
    result = await asyncio.wait_for(run, 60)
    assert result.cause is EndCause.EXITED and result.exit_code == 0
    assert len(sink.stdout) == 4_000_000 and done.exists()

"""A real phase whose model text and tool output carry terminal escapes and bidi overrides: every
view of the command line shows them as escapes and obeys none (issue 30.5, finding 4).

The model (the scripted API) writes an OSC 52 clipboard write and a bidi override into its text;
its Bash prints an OSC 0 title, a screen clear, a cursor move, a C1 CSI and an isolate. `run`,
`watch` and `replay` (of the server's copy and of the raw recording) and `inspect … events` then
print the phase to a pipe, where Rich adds no escape of its own: any control byte in the output
came from the phase."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.processes import serve_env, serving_port, start_serve

from helix_runner.offline import Reply, Script

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

MODEL_SAYS = "Done \x1b]52;c;cm0gLXJmIH4=\x07 and \u202etxt.exe"
BASH = r"printf '\033]0;pwned\007\033[2J\033[1;1Hfake prompt \302\23331m \342\201\246x\342\201\251\n'"
OBEYED = ("\x1b", "\x07", "\u202e", "\x9b", "\u2066", "\u2069")


def _cli(address: str, env: dict, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "helix_runner", *args, "--server", address], capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def test_every_view_shows_the_escapes_a_phase_wrote_and_obeys_none(claude_binary, tmp_path):
    script = tmp_path / "script.json"
    Script([Reply.tool_use("Bash", {"command": BASH}), Reply.text(MODEL_SAYS)]).save(script)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "serve.log"
    server = start_serve(tmp_path, log, "--offline-script", str(script))
    env = serve_env(tmp_path)
    try:
        address = f"127.0.0.1:{serving_port(log, server)}"
        outputs = {"run": _cli(address, env, "run", "--workdir", str(work), "--prompt", "go", "--allowed-tool", "Bash",
                               "--job-id", "esc", "--phase-id", "p")}
        outputs["watch"] = _cli(address, env, "watch", "esc", "p")
        outputs["replay"] = _cli(address, env, "replay", "esc", "p")
        outputs["inspect events"] = _cli(address, env, "inspect", "esc", "p", "events")
        (recording,) = (tmp_path / "data" / "recordings" / "esc").iterdir()
        outputs["replay recording"] = _cli(address, env, "replay", str(recording))
    finally:
        server.terminate()
        server.wait(30)
    for view, text in outputs.items():
        obeyed = sorted({repr(c) for c in OBEYED if c in text})
        assert not obeyed, (view, obeyed, text[-3000:])
    for view in ("watch", "replay", "replay recording"):
        assert "\\x1b]52;c;" in outputs[view] and "\\u202etxt.exe" in outputs[view], (view, outputs[view][-3000:])
        assert "\\x1b]0;pwned\\x07" in outputs[view] and "\\x1b[2J" in outputs[view], (view, outputs[view][-3000:])

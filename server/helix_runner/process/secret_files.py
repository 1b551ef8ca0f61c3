"""The CLI's secret-bearing JSON options as private files instead of command-line arguments.

``--mcp-config``, ``--settings`` and ``--agents`` may hold secrets (an MCP server's ``env`` or
headers, the key helper's command, settings ``env``). Passed inline, they sit in the CLI's argv,
which ``/proc/<pid>/cmdline`` shows to every user of the host for as long as the phase runs. CLI
2.1.330 takes a file path for each instead (``claude --help``: ``--mcp-config <configs...>`` "JSON
files or strings", ``--settings <file-or-json>``, ``--agents <json-or-file>`` "with --print the
path to a file"), so the server writes each value to a 0600 file in a 0700 directory of its own
per phase run, under ``<data_dir>/phase-secrets/`` (outside every workspace the CLI works in),
passes the path, and removes the directory when the phase ends; a restarted server removes what a
crashed one left (``sweep``). The record of the argv is made from the inline form
(``claude_command.redact_argv``), so it still names the MCP servers, agents and settings keys.

The system prompts (``--system-prompt``, ``--append-system-prompt``) go the same way, as
``--system-prompt-file`` / ``--append-system-prompt-file`` (CLI 2.1.332 builds the same system
blocks from them; ``tests/api/test_secret_option_files.py`` checks it against the scripted API):
they are the caller's instructions, and where no PID namespace hides the CLI (the sandbox's
Landlock-only mode, or none) other phases would read them in its command line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

# The flags whose JSON value is written to a file (one `--flag=value` argument each, as
# claude_command builds them).
FILE_FLAGS = ("--mcp-config", "--settings", "--agents")
# Flags whose value (the next argument) is text the CLI also takes from a file, with this flag.
TEXT_FILE_FLAGS = {"--system-prompt": "--system-prompt-file", "--append-system-prompt": "--append-system-prompt-file"}


def secrets_root(data_dir: Path) -> Path:
    """Where the per-run directories live."""
    return data_dir / "phase-secrets"


class SecretArgFiles:
    """The private directory of one phase run; ``externalize`` writes into it, ``remove`` deletes it."""

    def __init__(self, data_dir: Path, run_id: str) -> None:
        self.root = secrets_root(data_dir)
        self.path = self.root / run_id
        self._written: dict[tuple[str, str], Path] = {}

    def externalize(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with each ``--mcp-config=``/``--settings=``/``--agents=`` JSON value, and each
        system prompt (``--system-prompt VALUE`` and its ``--append-`` form: two arguments, as
        claude_command builds them), replaced by the path of a file holding it (written once per
        distinct value; later attempts reuse it)."""
        out: list[str] = []
        args = iter(argv)
        for arg in args:
            flag, eq, value = arg.partition("=")
            if eq and flag in FILE_FLAGS and value.lstrip().startswith("{"):
                out.append(f"{flag}={self._file_for(flag, value)}")
            elif arg in TEXT_FILE_FLAGS:
                text = next(args, None)
                if text is None:  # no value: left for the CLI to refuse, as it would inline
                    out.append(arg)
                else:
                    out.append(f"{TEXT_FILE_FLAGS[arg]}={self._file_for(arg, text, suffix='.txt')}")
            else:
                out.append(arg)
        return out

    def _file_for(self, flag: str, value: str, *, suffix: str = ".json") -> Path:
        key = (flag, hashlib.sha256(value.encode()).hexdigest())
        path = self._written.get(key)
        if path is None:
            self._make_dir()
            path = self.path / f"{flag.lstrip('-')}-{len(self._written) + 1}{suffix}"
            # O_EXCL | O_NOFOLLOW: never write through something another process put there.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(value)
            self._written[key] = path
        return path

    def _make_dir(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # mkdir's mode is masked by the umask, and an old root may be wider
        try:
            self.path.mkdir(mode=0o700)
        except FileExistsError:
            info = os.lstat(self.path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                raise
        os.chmod(self.path, 0o700)

    def remove(self) -> None:
        """Deletes the directory and its files (nothing happens if none was written)."""
        self._written.clear()
        shutil.rmtree(self.path, ignore_errors=True)


def sweep(data_dir: Path) -> int:
    """Removes every run directory under ``<data_dir>/phase-secrets`` (at start-up, when no phase of
    this server runs: they were left by a server that died); returns how many there were."""
    root = secrets_root(data_dir)
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    return len(entries)

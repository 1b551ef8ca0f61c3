"""Shared test helpers: running the real Claude Code CLI in isolation against the scripted Messages API."""

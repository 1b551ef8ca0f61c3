"""What one phase may make the server write (domain/output_budget.py): counted as written, said once."""

from __future__ import annotations

from helix_runner.domain.output_budget import OutputBudget


def test_the_budget_says_once_when_the_cap_is_passed():
    budget = OutputBudget(16 << 20)
    assert not budget.charge(16 << 20)  # at the cap: still within
    assert budget.charge(1)
    assert not budget.charge(1 << 30)  # said once: the run stops the phase once
    assert budget.used == (16 << 20) + 1 + (1 << 30)
    assert "16 MiB (phase_output_max_bytes" in budget.describe()


def test_no_cap_counts_and_never_says():
    budget = OutputBudget(0)
    assert not budget.charge(1 << 40) and budget.used == 1 << 40

"""How much a property or differential test draws: all of it in the full suite, a sample in the fast tier.

Hypothesis profiles (registered in tests/conftest.py, chosen by ``HYPOTHESIS_PROFILE``): ``ci``,
the default, gives every property test the example count it names (``examples(n)`` is ``n``);
``dev``, which ``scripts/test --fast`` selects, caps each at ``DEV_EXAMPLES`` (tests that name no
count draw that many too). The seeded differential tests take a prefix of their generated inputs
the same way. The full suite keeps the whole property coverage; the fast tier checks every
property on a sample.
"""

from __future__ import annotations

import os

DEV_EXAMPLES = 25
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "dev"):
    raise RuntimeError(f"HYPOTHESIS_PROFILE={PROFILE!r}: the profiles are 'ci' and 'dev' (tests/support/properties.py)")


def examples(full: int, sample: int = DEV_EXAMPLES) -> int:
    """``full`` in the full suite; in the fast tier (``dev``) at most ``sample``."""
    return full if PROFILE == "ci" else min(full, sample)

"""How many examples a property test runs.

Every explicit example count in ``tests/property`` goes through :func:`examples`: under
Hypothesis' default profile (``make test``) a test runs the count as written; under the ``fast``
profile, which ``make fast`` selects with ``--hypothesis-profile=fast`` (registered in
``tests/conftest.py``), it runs a quarter of it, and tests without an explicit count run 25
instead of Hypothesis' 100.
"""

from __future__ import annotations

from typing import Final

from hypothesis import settings

#: Hypothesis' own default ``max_examples``: a profile's count relative to it scales every
#: explicit count.
HYPOTHESIS_DEFAULT_EXAMPLES: Final = 100
#: ``max_examples`` of the ``fast`` profile.
FAST_EXAMPLES: Final = 25


def register_profiles() -> None:
    """Register the ``fast`` profile (a quarter of every example count)."""
    settings.register_profile("fast", max_examples=FAST_EXAMPLES)


def examples(n: int) -> int:
    """``n`` scaled by the loaded profile: ``n`` under the default profile, a quarter of it (at
    least 1) under ``fast``."""
    return max(1, n * settings.default.max_examples // HYPOTHESIS_DEFAULT_EXAMPLES)

"""Shared settings and checks of the fuzz tests (``tests/property/test_fuzz_*.py``).

Each fuzz test feeds generated (or mutated) input to one parser or decoder and checks three
things: it returns or raises only the error classes its docstring names (:func:`only`), it takes
bounded time (Hypothesis' ``deadline`` per example, :data:`FUZZ`), and it allocates memory in
proportion to its input, not to lengths the input declares (:func:`peak_allocation`). Example
counts are small so that the whole fuzz set runs in well under a minute; ``FUZZ_EXAMPLES``
(environment) multiplies them for a longer run on a quiet machine.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings

from _support.examples import examples as scaled

#: Multiplier of every fuzz test's example count (``FUZZ_EXAMPLES=20`` for a long run).
SCALE = max(1, int(os.environ.get("FUZZ_EXAMPLES", "1")))
#: Longest time one example may take (the machine is shared: generous, but bounded).
DEADLINE = timedelta(seconds=2)


def fuzz(examples: int) -> Any:
    """Hypothesis settings of a fuzz test with ``examples`` examples (a quarter under ``make fast``,
    :mod:`_support.examples`; times :data:`SCALE`)."""
    return settings(
        max_examples=scaled(examples) * SCALE,
        deadline=DEADLINE,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def only(errors: tuple[type[BaseException], ...], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, or None when it raised one of ``errors``; any other exception
    propagates (the test fails with it)."""
    try:
        return fn(*args, **kwargs)
    except errors:
        return None


def peak_allocation(fn: Callable[..., Any], *args: Any) -> int:
    """The most memory (bytes traced by tracemalloc) ``fn(*args)`` held at once; its exception,
    if any, is swallowed (the caller checks errors separately)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            fn(*args)
        except Exception:  # only the allocation is measured here
            pass
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()

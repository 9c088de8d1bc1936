"""The process helpers of the integration tests. They live in ``tests/_support/procs.py`` so that
the interop and crash tests share them; ``from procs import ...`` keeps working here."""

from _support.procs import *  # noqa: F403

"""Whole directory trees read for comparison in tests."""

from __future__ import annotations

import os
import pathlib


def tree_bytes(root: str) -> dict[str, bytes]:
    """Every file below ``root`` by its path relative to ``root``, with its bytes."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = pathlib.Path(path).read_bytes()
    return out

"""The two implementations of the accelerated codec functions (:mod:`rocketq.speedups`), for
tests that must pass with both: the compiled one (when built) and the pure-Python one.

:func:`bound` rebinds every accelerated name, in the record module, in each loaded ``rocketq``
module that imported the name, and in the given test modules, to one implementation, and sets
the dispatch parser's compiled scan (``record_scan._scan_window``), the index's compiled entry
loops (``index_file._index_put_keys``, ``index_file._index_put_file``), the ConsumeQueue's
compiled run loops (``consume_queue._cq_pack_run``, ``consume_queue._cq_put_run``) and the
dispatchers' compiled loops over a small window's requests (``consume_queue._cq_group_requests``,
``index_file._index_entries_of``) to it or None."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from rocketq import speedups
from rocketq.protocol import record
from rocketq.store import consume_queue, index_file, record_scan

IMPLEMENTATIONS = ("compiled", "pure")


def cannot_build() -> str:
    """Why this machine cannot build the extension: no Python headers or no C compiler ("" when
    it can)."""
    include = sysconfig.get_paths().get("include", "")
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python headers (Python.h) in {include}: the C accelerator cannot be built here"
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split() or ["cc"]
    if shutil.which(cc[0]) is None:
        return f"no C compiler ({cc[0]} not found): the C accelerator cannot be built here"
    return ""


def functions(impl: str) -> dict[str, Callable[..., Any]]:
    """name -> function of one implementation (the compiled module must be loaded)."""
    if impl == "pure":
        return dict(record.PURE_FUNCTIONS)
    assert speedups.COMPILED is not None
    return {name: getattr(speedups.COMPILED, name) for name in record.PURE_FUNCTIONS}


@contextlib.contextmanager
def bound(impl: str, *extra: ModuleType) -> Iterator[None]:
    """Every accelerated name bound to ``impl`` ("compiled" or "pure") while the block runs."""
    chosen = functions(impl)
    variants = {name: {id(record.PURE_FUNCTIONS[name]), id(fn)} for name, fn in functions("pure").items()}
    if speedups.COMPILED is not None:
        for name, fn in functions("compiled").items():
            variants[name].add(id(fn))
    modules = [m for n, m in list(sys.modules.items()) if n.startswith("rocketq") and m is not None]
    with contextlib.ExitStack() as stack:
        patch = stack.enter_context(_patcher())
        for module in [*modules, *extra]:
            for name, fn in chosen.items():
                if id(vars(module).get(name)) in variants[name]:
                    patch(module, name, fn)
        compiled = speedups.COMPILED
        patch(record_scan, "_scan_window", None if impl == "pure" else compiled.scan_window)  # type: ignore[union-attr]
        patch(index_file, "_index_put_keys", None if impl == "pure" else compiled.index_put_keys)  # type: ignore[union-attr]
        patch(consume_queue, "_cq_pack_run", None if impl == "pure" else compiled.cq_pack_run)  # type: ignore[union-attr]
        patch(consume_queue, "_cq_put_run", None if impl == "pure" else compiled.cq_put_run)  # type: ignore[union-attr]
        patch(consume_queue, "_cq_group_requests", None if impl == "pure" else compiled.cq_group_requests)  # type: ignore[union-attr]
        patch(index_file, "_index_put_file", None if impl == "pure" else compiled.index_put_file)  # type: ignore[union-attr]
        patch(index_file, "_index_entries_of", None if impl == "pure" else compiled.index_entries_of)  # type: ignore[union-attr]
        yield


@contextlib.contextmanager
def _patcher() -> Iterator[Callable[[ModuleType, str, object], None]]:
    saved: list[tuple[ModuleType, str, object]] = []

    def patch(module: ModuleType, name: str, value: object) -> None:
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    try:
        yield patch
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)

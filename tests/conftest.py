from __future__ import annotations

import pathlib
import shutil
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from _support.codecs import IMPLEMENTATIONS, bound
from _support.examples import register_profiles
from rocketq import speedups
from rocketq.config import StoreConfig

# `make fast` runs the property tests with --hypothesis-profile=fast (tests/_support/examples.py)
register_profiles()

_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_CALL_REPORT] = report


@pytest.fixture(autouse=True)
def _free_tmp_path_of_passed_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's tmp_path goes once the test passed: even with the small stores the harness gives
    brokers (``_support/procs.py``: 16 MiB CommitLog segments, reserved up front, plus the next one
    ahead of time) a whole run would otherwise keep GiBs until pytest's next runs rotate them out.
    Failed tests keep theirs to look at. (Autouse fixtures are set up first and torn down last,
    after the test's processes stopped.)"""
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    report = request.node.stash.get(_CALL_REPORT, None)
    if path is not None and report is not None and report.passed:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def store_config(tmp_path: pathlib.Path) -> StoreConfig:
    """A store config with small segments, so tests roll segments quickly."""
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=64,
        max_index_num=256,
    )


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def codec_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a module's tests once per codec implementation (``_support/codecs.py``): compiled
    (skipped, saying why, when the C accelerator is not in use) and pure Python. Modules opt in
    with ``pytestmark = pytest.mark.usefixtures("codec_impl")``."""
    impl: str = request.param
    if impl == "compiled" and speedups.COMPILED is None:
        pytest.skip(f"compiled codecs not in use: {speedups.REASON}")
    with bound(impl, request.module):
        yield impl

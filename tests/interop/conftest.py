"""Fixtures for the ali-ons interop tests (the machinery is in ``ali_ons_harness.py``).

Node.js and npm are required: without them the tests fail with a message saying so, they are
not skipped.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator

import pytest
from ali_ons_harness import Interop, install_ali_ons


@pytest.fixture(scope="session")
def node_bin() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "tests/interop needs Node.js: `node` is not on PATH. Install Node.js (>= 14) and npm "
            "(e.g. apt-get install nodejs npm, or https://nodejs.org) and run the tests again."
        )
    return node


@pytest.fixture(scope="session")
def ali_ons_module(node_bin: str) -> str:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(
            "tests/interop needs npm to install ali-ons@3.12.0: `npm` is not on PATH. "
            "Install npm (it ships with Node.js) and run the tests again."
        )
    return install_ali_ons(npm)


@pytest.fixture
def interop(node_bin: str, ali_ons_module: str, tmp_path: pathlib.Path) -> Iterator[Interop]:
    env = Interop(node_bin, ali_ons_module, tmp_path)
    try:
        yield env
    finally:
        env.close()

"""Every ``python`` block of ``docs/client.md`` runs as written against a real in-process name
server and broker (``rocketq.testing.InProcessCluster``), in document order, as a reader following
the page would run them: the blocks share the cluster (a topic the producer example creates is
there for the consumer examples), each block runs in a fresh namespace, in a temporary working
directory. The only rewrite is the name server address (``tests/_support/doc_blocks.py``); a
block marked ``<!-- not-run: reason -->`` is skipped with its reason. A block that makes the
client or the servers log a warning fails too: an example should not teach a mistake."""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Iterator

import pytest

from _support.doc_blocks import DOC_NAMESRV, Block, python_blocks, with_endpoint
from rocketq.testing import InProcessCluster

BLOCKS = python_blocks("client.md")


@pytest.fixture(scope="module")
def doc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with InProcessCluster(data_dir=tmp_path_factory.mktemp("doc-cluster")) as cluster:
        yield cluster


def test_the_page_has_blocks_that_use_the_documented_address() -> None:
    assert len(BLOCKS) >= 8
    assert all(DOC_NAMESRV in b.code for b in BLOCKS if b.not_run is None)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_block_runs(
    block: Block,
    doc_cluster: InProcessCluster,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if block.not_run is not None:
        pytest.skip(f"marked not-run: {block.not_run}")
    caplog.set_level(logging.WARNING, logger="rocketq")
    monkeypatch.chdir(tmp_path)
    code = compile(with_endpoint(block.code, doc_cluster.namesrv_addr), block.name, "exec")
    exec(code, {"__name__": "__main__"})
    warnings = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], f"{block.name} logged warnings"

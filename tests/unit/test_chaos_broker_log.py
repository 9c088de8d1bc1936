"""A chaos node's broker log: appended to across restarts, each start marked by a line of its
own; the loggers named in ``ROCKETQ_LOG_INFO`` (the harness's ``DIAGNOSTIC_LOGGERS``) log at INFO
without ``-v``."""

from __future__ import annotations

import logging
import pathlib

import pytest

from rocketq.cli import LOG_INFO_ENV, main
from rocketq.testing.chaos.cluster import DIAGNOSTIC_LOGGERS, ChaosGroup, _Node


def test_a_restarted_broker_s_log_keeps_what_its_earlier_starts_wrote(tmp_path: pathlib.Path) -> None:
    group = ChaosGroup(tmp_path)
    props = {
        "bindAddress": "127.0.0.1",
        "listenPort": "1",
        "dLegerPeers": "n0-127.0.0.1:2",
        "storePathRootDir": str(tmp_path / "store"),
    }
    # no conf file: each start of the broker exits at once, saying why
    node = _Node(0, "n0", str(tmp_path / "broker-n0.conf"), props, str(tmp_path))
    for _ in range(2):
        group._spawn(node)
        assert node.proc is not None and node.proc.wait(60) == 1
    text = (tmp_path / "broker-n0.log").read_text()
    assert text.startswith("--- chaos: start 1 of broker n0 at ")
    first_error = text.index("No such file or directory")
    assert (
        first_error
        < text.index("--- chaos: start 2 of broker n0 at ")
        < text.rindex("No such file or directory")
    )
    assert node.starts == 2


def test_rocketq_log_info_names_loggers_that_log_at_info_without_v(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "rocketq.broker.pull" in DIAGNOSTIC_LOGGERS
    monkeypatch.setenv(LOG_INFO_ENV, " rocketq.test.diagnostic ,,")
    logger = logging.getLogger("rocketq.test.diagnostic")
    try:
        assert main(["demo", "--data-dir", str(tmp_path / "demo"), "--count", "10"]) == 0
        assert logger.level == logging.INFO
        assert logging.getLogger("rocketq.test").level == logging.NOTSET
    finally:
        logger.setLevel(logging.NOTSET)

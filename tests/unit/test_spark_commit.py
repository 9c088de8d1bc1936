"""Pure parts of the write commit: options, marker compatibility, the in-doubt report."""

from __future__ import annotations

import pytest

from rocketq.errors import ConfigError
from rocketq.spark.commit import _Broker, describe_in_doubt
from rocketq.spark.options import DEFAULT_COMMIT_RETRY_MS, parse_write_options
from rocketq.spark.staged import StagedMessage


def test_commit_retry_option() -> None:
    base = {"nameServer": "127.0.0.1:9876", "topic": "T"}
    assert parse_write_options(base, streaming=False).commit_retry_ms == DEFAULT_COMMIT_RETRY_MS
    assert parse_write_options({**base, "commitRetryMs": "0"}, streaming=False).commit_retry_ms == 0
    with pytest.raises(ConfigError, match=r"commitRetryMs=-5 must be >= 0"):
        parse_write_options({**base, "commitRetryMs": "-5"}, streaming=False)


def test_markers_written_before_queue_names_still_load() -> None:
    old = {"addr": "h:1", "topic": "T", "tran_state_offset": 3, "commit_log_offset": 99, "msg_id": "M"}
    m = StagedMessage(**old)  # type: ignore[arg-type]
    assert (m.broker, m.queue_id) == ("", -1)


def test_in_doubt_report_names_broker_and_queue_counts() -> None:
    halves = [StagedMessage("h:1", "T", i, 100 + i, f"M{i}", "broker-b", i % 2) for i in range(5)]
    b = _Broker("h:1", {m.tran_state_offset: m for m in halves}, last_error="connection refused")
    b.names.add("broker-b")
    text = describe_in_doubt([b])
    assert text == (
        "broker broker-b (h:1): T/broker-b/0 (3 rows), T/broker-b/1 (2 rows); last error: connection refused"
    )

"""Pure rules of the ``rocketq`` Spark data source: offsets JSON, options, rate limits, data loss."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketq.errors import ConfigError
from rocketq.spark.batch import Restrictions, apply_filter
from rocketq.spark.offsets import (
    DataLossError,
    QueueRef,
    check_data_loss,
    next_end,
    offsets_from_json,
    offsets_to_json,
    parse_offset_spec,
    parse_tag_expression,
    pieces_per_queue,
    plan_stream_ranges,
    rate_limit,
    resolve_offset,
    split_range,
)
from rocketq.spark.options import parse_read_options, parse_write_options
from rocketq.spark.writer import check_write_schema, row_to_message

A0 = QueueRef("T", "broker-a", 0)
A1 = QueueRef("T", "broker-a", 1)
B0 = QueueRef("T", "broker-b", 0)


def test_offsets_json_round_trip_nested_by_topic_broker_queue() -> None:
    offsets = {A0: 12, A1: -2, B0: -1, QueueRef("U", "broker-a", 3): 0}
    doc = offsets_to_json(offsets)
    assert doc == {"T": {"broker-a": {"0": 12, "1": -2}, "broker-b": {"0": -1}}, "U": {"broker-a": {"3": 0}}}
    assert offsets_from_json(doc) == offsets
    assert offsets_from_json('{"T":{"broker-a":{"0":12}}}') == {A0: 12}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "neither earliest/latest nor JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"T": 3}', "topic 'T' must map broker names"),
        ('{"T": {"broker-a": 1}}', "T/broker-a must map queue ids"),
        ('{"T": {"broker-a": {"x": 1}}}', "queue id 'x'"),
        ('{"T": {"broker-a": {"0": -3}}}', "must be an integer >= -2"),
        ('{"T": {"broker-a": {"0": "5"}}}', "must be an integer >= -2"),
        ('{"T": {"broker-a": {"0": true}}}', "must be an integer >= -2"),
    ],
)
def test_bad_offsets_json_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_offset_spec(text, what="startingOffsets")


def test_offset_specs_and_resolution() -> None:
    assert parse_offset_spec(" Earliest ", what="s") == "earliest"
    assert parse_offset_spec("latest", what="e", allow_earliest=False) == "latest"
    with pytest.raises(ConfigError, match="cannot be 'earliest'"):
        parse_offset_spec("earliest", what="endingOffsets", allow_earliest=False)
    with pytest.raises(ConfigError, match=r"cannot use -2 \(earliest\): T/broker-a/0"):
        parse_offset_spec('{"T":{"broker-a":{"0":-2}}}', what="endingOffsets", allow_earliest=False)
    assert resolve_offset(-2, 5, 20) == 5
    assert resolve_offset(-1, 5, 20) == 20
    assert resolve_offset(7, 5, 20) == 7
    assert resolve_offset(3, 5, 20) == 5
    assert resolve_offset(30, 5, 20) == 20


def test_tag_expression() -> None:
    assert parse_tag_expression("*") is None
    assert parse_tag_expression(None) is None
    assert parse_tag_expression(" TagA || TagB ") == frozenset({"TagA", "TagB"})
    with pytest.raises(ConfigError, match="names no tag"):
        parse_tag_expression("||")


def test_rate_limit_is_proportional_and_exact() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 10, A1: 10, B0: 10}
    end = rate_limit(start, latest, 15)
    assert sum(end.values()) == 15
    assert all(0 <= end[r] <= latest[r] for r in latest)
    skewed = rate_limit({A0: 0, A1: 0}, {A0: 90, A1: 10}, 10)
    assert skewed == {A0: 9, A1: 1}
    assert rate_limit(start, latest, 100) == latest


@given(
    st.dictionaries(
        st.integers(0, 7), st.tuples(st.integers(0, 50), st.integers(0, 80)), min_size=1, max_size=8
    ),
    st.integers(0, 200),
)
def test_rate_limit_never_overshoots(queues: dict[int, tuple[int, int]], max_rows: int) -> None:
    start = {QueueRef("T", "b", q): s for q, (s, _) in queues.items()}
    latest = {QueueRef("T", "b", q): s + n for q, (s, n) in queues.items()}
    end = rate_limit(start, latest, max_rows)
    admitted = sum(end[r] - start[r] for r in latest)
    assert admitted == min(max_rows, sum(latest[r] - start[r] for r in latest))
    assert all(start[r] <= end[r] <= latest[r] for r in latest)


def test_split_range_and_pieces() -> None:
    assert split_range(0, 10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_range(5, 7, 8) == [(5, 6), (6, 7)]
    assert split_range(4, 4, 2) == []
    pieces = pieces_per_queue({A0: 100, A1: 10, B0: 0}, 8)
    assert B0 not in pieces
    assert sum(pieces.values()) >= 8 and pieces[A0] > pieces[A1] >= 1
    assert pieces_per_queue({A0: 5, A1: 5}, 1) == {A0: 1, A1: 1}


def test_data_loss_fails_or_skips_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert check_data_loss(A0, 10, 5, fail_on_data_loss=True).start == 10
    with pytest.raises(
        DataLossError, match=r"topic T, broker broker-a, queue 0 .*offsets \[3, 8\).*min offset is 8"
    ):
        check_data_loss(A0, 3, 8, fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING):
        decision = check_data_loss(A0, 3, 8, fail_on_data_loss=False)
    assert (decision.start, decision.lost) == (8, 5)
    assert "failOnDataLoss=false" in caplog.text
    # a range entirely below the min offset loses just that range
    assert check_data_loss(A0, 3, 8, fail_on_data_loss=False, end=6).start == 6


def test_stream_ranges_new_queues_and_retention() -> None:
    start = {A0: 4, A1: 2}
    end = {A0: 10, A1: 2, B0: 6}
    # B0 is new (not in start): it starts at its earliest offset, silently
    assert plan_stream_ranges(start, end, {A0: 0, A1: 0, B0: 3}, fail_on_data_loss=True) == {
        A0: (4, 10),
        B0: (3, 6),
    }
    with pytest.raises(DataLossError):
        plan_stream_ranges(start, end, {A0: 6, A1: 0, B0: 0}, fail_on_data_loss=True)
    assert plan_stream_ranges(start, end, {A0: 6, A1: 0, B0: 0}, fail_on_data_loss=False)[A0] == (6, 10)


def test_next_end_rate_limits_and_stops_at_the_available_now_target() -> None:
    start = {A0: 0, A1: 0}
    latest = {A0: 10, A1: 10, B0: 4}
    mins = {A0: 0, A1: 0, B0: 0}
    assert next_end(start, latest, mins, max_rows=None, target=None) == latest
    limited = next_end(start, latest, mins, max_rows=12, target=None)
    assert sum(limited.values()) == 12
    # availableNow: queues found after the target was fixed wait; offsets stop at the target
    capped = next_end(start, latest, mins, max_rows=None, target={A0: 6, A1: 10})
    assert capped == {A0: 6, A1: 10}
    # a queue that left the route keeps its offset
    assert next_end({A0: 3, A1: 7}, {A0: 9}, {A0: 0}, max_rows=None, target=None) == {A0: 9, A1: 7}


def test_read_options_parse_and_report_every_problem() -> None:
    opts = parse_read_options(
        {"NAMESERVER": "127.0.0.1:9876", "topic": "A, B,A", "subExpression": "x||y", "minPartitions": "4"},
        streaming=False,
    )
    assert opts.topics == ("A", "B")
    assert opts.starting_offsets == "earliest" and opts.ending_offsets == "latest"
    assert opts.tags == frozenset({"x", "y"}) and opts.min_partitions == 4
    assert (
        parse_read_options({"nameServer": "n:1", "topic": "A"}, streaming=True).starting_offsets == "latest"
    )
    pattern = parse_read_options({"nameServer": "n:1", "topicPattern": "Or.*"}, streaming=True)
    assert pattern.matches_topic("Orders") and not pattern.matches_topic("XOrders")
    with pytest.raises(ConfigError) as err:
        parse_read_options(
            {
                "topic": "A",
                "topicPattern": "B",
                "maxOffsetsPerTrigger": "0",
                "failOnDataLoss": "maybe",
                "pullBatchSize": "5000",
            },
            streaming=True,
        )
    text = str(err.value)
    for fragment in (
        "nameServer is required",
        "exactly one of topic",
        "maxOffsetsPerTrigger=0 must be >= 1",
        "failOnDataLoss='maybe'",
        "pullBatchSize=5000 must be in [1, 1024]",
    ):
        assert fragment in text
    with pytest.raises(ConfigError, match="endingOffsets applies to batch reads only"):
        parse_read_options({"nameServer": "n:1", "topic": "A", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(ConfigError, match="maxOffsetsPerTrigger applies to streaming"):
        parse_read_options({"nameServer": "n:1", "topic": "A", "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_write_options() -> None:
    opts = parse_write_options({"nameServer": "n:1", "topic": "T"}, streaming=False)
    assert opts.topic == "T" and opts.write_timeout_ms == 600_000
    with pytest.raises(ConfigError, match="checkpointLocation"):
        parse_write_options({"nameServer": "n:1"}, streaming=True)
    with pytest.raises(ConfigError, match="writeTimeoutMs=5 must be >= 1000"):
        parse_write_options({"nameServer": "n:1", "writeTimeoutMs": "5"}, streaming=False)


def test_pushed_filters_narrow_queues_offsets_and_tags() -> None:
    r = Restrictions()
    assert apply_filter(r, "queueId", "in", (0, 2, 3))
    assert apply_filter(r, "queueId", "<", 3)
    assert apply_filter(r, "queueOffset", ">=", 10)
    assert apply_filter(r, "queueOffset", "<=", 19)
    assert apply_filter(r, "tags", "=", "TagA")
    assert apply_filter(r, "brokerName", "=", "broker-a")
    assert not apply_filter(r, "body", "=", b"x")
    assert not apply_filter(r, "queueOffset", "=", "12")
    assert [q for q in range(5) if r.allows_queue(QueueRef("T", "broker-a", q))] == [0, 2]
    assert not r.allows_queue(QueueRef("T", "broker-b", 0))
    assert r.narrow(0, 100) == (10, 20)
    assert r.narrow(15, 17) == (15, 17)
    assert r.tags == frozenset({"TagA"})
    exact = Restrictions()
    assert apply_filter(exact, "queueOffset", "in", [5, 9])
    assert exact.narrow(0, 100) == (5, 10)


def test_write_rows_and_schema_checks() -> None:
    msg, key = row_to_message(
        {"body": "hé", "tags": "T1", "keys": "a b", "properties": {"p": "1"}, "shardingKey": "k"}, "Dflt"
    )
    assert (msg.topic, msg.body, msg.tags, tuple(msg.keys), msg.properties, key) == (
        "Dflt",
        "hé".encode(),
        "T1",
        ("a", "b"),
        {"p": "1"},
        "k",
    )
    assert row_to_message({"body": b"x", "topic": "Own", "keys": ["k1"]}, "Dflt")[0].topic == "Own"
    with pytest.raises(ConfigError, match="null body"):
        row_to_message({"body": None}, "T")
    with pytest.raises(ConfigError, match="no topic"):
        row_to_message({"body": b"x"}, None)
    check_write_schema({"body": "binary", "other": "int"}, "T")
    with pytest.raises(ConfigError) as err:
        check_write_schema({"tags": "int", "value": "binary"}, None)
    assert "column 'body'" in str(err.value) and "'topic' column" in str(err.value)
    assert "column 'tags' must be string, not int" in str(err.value)

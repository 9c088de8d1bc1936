"""RocketMQ's message trace format (``TraceDataEncoder``): records built by hand in the documented
field order decode to the right values and encode back to the same bytes."""

from __future__ import annotations

import pytest

from rocketq.client.admin import MessageView
from rocketq.client.trace import format_trace, trace_events
from rocketq.errors import BodyFormatError
from rocketq.protocol import trace as tr

C = "\x01"
F = "\x02"
MSG = "7F00000100002A9F0000000000000001"
OFFSET_ID = "7F00000100002A9F0000000000001234"


def rec(*fields: str) -> str:
    return C.join(fields) + F


PUB = rec(
    "Pub", "1700000000000", "DefaultRegion", "PG", "T", MSG, "TagA", "k1 k2", "127.0.0.1:10911",
    "5", "3", "0", OFFSET_ID, "true",
)  # fmt: skip
PUB_OLD = rec(
    "Pub", "1700000000000", "R", "PG", "T", MSG, "null", "null", "1.2.3.4:10911", "5", "3", "1", "false"
)
PUB_HOST = rec(
    "Pub", "1", "R", "PG", "T", MSG, "a", "b", "h:1", "5", "3", "0", OFFSET_ID, "true", "10.0.0.9@pid"
)
SUB_BEFORE = rec("SubBefore", "1700000000100", "DefaultRegion", "G", "REQ1", MSG, "2", "k1 k2")
SUB_AFTER = rec("SubAfter", "REQ1", MSG, "17", "false", "k1 k2", "4", "1700000000200", "G")
SUB_AFTER_CLOUD = "SubAfter" + C + C.join(["REQ1", MSG, "17", "true", "k1", "0"]) + C + F
SUB_AFTER_OLD = rec("SubAfter", "REQ1", MSG, "17", "true", "k1")
END_TX = rec(
    "EndTransaction",
    "1700000000300",
    "R",
    "PG",
    "T",
    MSG,
    "TagA",
    "k1",
    "h:1",
    "2",
    MSG,
    "COMMIT_MESSAGE",
    "true",
)
RECALL = rec("Recall", "1700000000400", "R", "PG", "T", MSG, "true")


@pytest.mark.parametrize(
    "text", [PUB, PUB_OLD, PUB_HOST, SUB_BEFORE, SUB_AFTER, SUB_AFTER_CLOUD, SUB_AFTER_OLD, END_TX, RECALL]
)
def test_every_record_form_round_trips_byte_for_byte(text: str) -> None:
    records = tr.decode_trace_data(text)
    assert len(records) == 1
    assert tr.encode_record(records[0]) == text


def test_records_decode_to_their_documented_fields() -> None:
    body = PUB + SUB_BEFORE + SUB_AFTER + END_TX
    pub, before, after, end = tr.decode_trace_data(body)
    assert (pub.type, pub.timestamp, pub.region_id, pub.group, pub.topic, pub.msg_id) == (
        "Pub", 1700000000000, "DefaultRegion", "PG", "T", MSG
    )  # fmt: skip
    assert (pub.tags, pub.keys, pub.store_host, pub.body_length, pub.cost_ms, pub.msg_type) == (
        "TagA", "k1 k2", "127.0.0.1:10911", 5, 3, 0
    )  # fmt: skip
    assert (pub.offset_msg_id, pub.success, pub.client_host) == (OFFSET_ID, True, None)
    assert (before.group, before.request_id, before.msg_id, before.retry_times, before.keys) == (
        "G", "REQ1", MSG, 2, "k1 k2"
    )  # fmt: skip
    assert (after.request_id, after.cost_ms, after.success, after.context_code) == ("REQ1", 17, False, 4)
    assert (after.timestamp, after.group) == (1700000000200, "G")
    assert (end.transaction_id, end.transaction_state, end.from_transaction_check) == (
        MSG,
        "COMMIT_MESSAGE",
        True,
    )
    assert end.msg_type == tr.MSG_TYPE_TRANS_COMMIT
    assert tr.encode_records([pub, before, after, end]) == body
    assert pub.key_list() == [MSG, "k1", "k2"]
    assert tr.decode_trace_data(PUB_OLD)[0].key_list() == [MSG]  # Java's null keys add none


def test_shorter_forms_keep_what_they_lack_unset() -> None:
    (old,) = tr.decode_trace_data(PUB_OLD)
    assert old.offset_msg_id is None and old.success is False and old.msg_type == 1
    (cloud,) = tr.decode_trace_data(SUB_AFTER_CLOUD)
    assert cloud.context_code == 0 and cloud.timestamp is None and cloud.group is None
    (oldest,) = tr.decode_trace_data(SUB_AFTER_OLD)
    assert oldest.context_code is None


def test_unknown_types_are_skipped_and_short_records_refused() -> None:
    assert tr.decode_trace_data(rec("Future", "1", "x") + SUB_BEFORE)[0].type == "SubBefore"
    with pytest.raises(BodyFormatError, match="SubBefore has 4 fields, at least 8"):
        tr.decode_trace_data(rec("SubBefore", "1", "R", "G"))
    with pytest.raises(BodyFormatError, match=r"field 6 \(retryTimes\)"):
        tr.decode_trace_data(rec("SubBefore", "1", "R", "G", "REQ", MSG, "two", "k"))
    with pytest.raises(ValueError, match="unknown trace type"):
        tr.encode_record(tr.TraceRecord("Nope"))


def view(body: str, born_host: str, store_ts: int) -> MessageView:
    return MessageView(
        topic=tr.TRACE_TOPIC,
        msg_id="X",
        queue_id=0,
        queue_offset=0,
        commit_log_offset=store_ts,
        body=body.encode(),
        born_host=born_host,
        store_timestamp=store_ts,
    )


def test_events_pair_outcomes_with_their_delivery_and_order_by_time() -> None:
    retry_pub = rec(
        "Pub", "1700000000200", "R", "G", "%RETRY%G", MSG, "TagA", "k1", "h:1", "5", "0", "3", "O", "true"
    )
    before2 = rec("SubBefore", "1700000001000", "R", "G", "REQ2", MSG, "1", "k1")
    after2 = rec("SubAfter", "REQ2", MSG, "5", "true", "k1", "0", "1700000001005", "G")
    other = rec("SubBefore", "1700000000150", "R", "G", "REQ9", "ANOTHER", "0", "k1")
    messages = [
        view(before2 + after2, "127.0.0.1:2000", 3),
        view(PUB, "127.0.0.1:1000", 1),
        view(SUB_BEFORE + other + SUB_AFTER + retry_pub, "127.0.0.1:2000", 2),
    ]
    events = trace_events(MSG, messages)
    assert [(e.event, e.attempt, e.group) for e in events] == [
        ("send", None, "PG"),
        ("deliver", 2, "G"),
        ("consume_failed", 2, "G"),
        ("retry", 3, "G"),
        ("deliver", 1, "G"),
        ("consumed", 1, "G"),
    ]
    assert events[0].client_host == "127.0.0.1:1000" and events[1].client_host == "127.0.0.1:2000"
    assert [e.status for e in events].count("failed") == 1
    text = format_trace(events)
    assert text.splitlines()[0].split()[:6] == [
        "#Type",
        "#Group",
        "#ClientHost",
        "#Time",
        "#CostTimes",
        "#Status",
    ]
    assert "%RETRY%G" in text and len(text.splitlines()) == 7
    assert "(no trace records)" in format_trace([])

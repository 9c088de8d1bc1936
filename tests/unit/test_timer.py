"""Timed delivery, pure parts: property conversion on put, the re-put message, the snapshot codec."""

from __future__ import annotations

import pytest

from rocketq.config import StoreConfig, from_rocketmq_properties
from rocketq.errors import ConfigError, MessageIllegal, ResponseCode, TimerMessageIllegal
from rocketq.message import BrokerMessage, MessageExt, decode_properties, encode_properties
from rocketq.protocol import record as rec
from rocketq.store.timer import (
    TIMER_TOPIC,
    SnapshotError,
    TimerPolicy,
    decode_snapshot,
    encode_snapshot,
    may_be_timer,
    requested_deliver_ms,
    timer_out_ms,
    timer_roll,
    timer_time_up,
    to_timer_topic,
)

NOW = 1_700_000_000_123
POLICY = TimerPolicy()


def msg(props: dict[str, str], topic: str = "T", queue_id: int = 3, sys_flag: int = 0) -> BrokerMessage:
    return BrokerMessage(
        topic=topic,
        body=b"body",
        properties=encode_properties(props).encode(),
        queue_id=queue_id,
        flag=7,
        sys_flag=sys_flag,
        born_timestamp=NOW - 5,
    )


def props_of(m: BrokerMessage) -> dict[str, str]:
    return decode_properties(m.properties.decode())


@pytest.mark.parametrize(
    ("name", "value", "deliver_ms"),
    [
        ("TIMER_DELIVER_MS", str(NOW + 10_500), NOW + 10_500),
        ("TIMER_DELAY_MS", "10500", NOW + 10_500),
        ("TIMER_DELAY_SEC", "10", NOW + 10_000),
        ("__STARTDELIVERTIME", str(NOW + 10_500), NOW + 10_500),
    ],
)
def test_each_property_sends_the_message_to_the_timer_topic(name: str, value: str, deliver_ms: int) -> None:
    original = msg({name: value, "UNIQ_KEY": "U1", "TAGS": "a"})
    out = to_timer_topic(original, POLICY, NOW)
    assert out.topic == TIMER_TOPIC and out.queue_id == 0
    props = props_of(out)
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "3"
    assert props["TIMER_OUT_MS"] == str(timer_out_ms(deliver_ms, 1000))
    assert props[name] == value and props["UNIQ_KEY"] == "U1" and props["TAGS"] == "a"
    assert (out.body, out.flag, out.born_timestamp) == (b"body", 7, NOW - 5)


def test_timer_out_ms_rounds_down_and_steps_back_on_a_multiple() -> None:
    assert timer_out_ms(10_500, 1000) == 10_000
    assert timer_out_ms(11_000, 1000) == 10_000  # RocketMQ: an exact multiple goes one step lower
    assert timer_out_ms(10_999, 100) == 10_900
    # Delivered at TIMER_OUT_MS + precision: never before the time asked for, less than a step after.
    for deliver in (10_001, 10_500, 10_999, 11_000):
        due = timer_out_ms(deliver, 1000) + 1000
        assert deliver <= due < deliver + 1000


def test_priority_is_delay_sec_then_delay_ms_then_deliver_ms_then_start_deliver_time() -> None:
    every = {
        "TIMER_DELAY_SEC": "5",
        "TIMER_DELAY_MS": "7000",
        "TIMER_DELIVER_MS": str(NOW + 9000),
        "__STARTDELIVERTIME": str(NOW + 11_000),
    }
    assert requested_deliver_ms(every, NOW) == NOW + 5000
    del every["TIMER_DELAY_SEC"]
    assert requested_deliver_ms(every, NOW) == NOW + 7000
    del every["TIMER_DELAY_MS"]
    assert requested_deliver_ms(every, NOW) == NOW + 9000
    del every["TIMER_DELIVER_MS"]
    assert requested_deliver_ms(every, NOW) == NOW + 11_000
    assert requested_deliver_ms({"KEYS": "k"}, NOW) is None


def test_delay_level_wins_and_the_timer_properties_are_removed() -> None:
    m = msg(
        {"DELAY": "2", "TIMER_DELIVER_MS": str(NOW + 5000), "TIMER_DELAY_SEC": "3", "TIMER_DELAY_MS": "9"}
    )
    out = to_timer_topic(m, POLICY, NOW)
    assert out.topic == "T"
    assert props_of(out) == {"DELAY": "2"}


@pytest.mark.parametrize("when", [NOW, NOW - 1, 0, -5])
def test_a_time_now_or_in_the_past_is_stored_in_the_real_topic_unchanged(when: int) -> None:
    m = msg({"TIMER_DELIVER_MS": str(when)})
    before = m.properties
    out = to_timer_topic(m, POLICY, NOW)
    assert out is m and out.topic == "T" and out.properties == before


def test_a_negative_relative_delay_is_due_at_once() -> None:
    out = to_timer_topic(msg({"TIMER_DELAY_SEC": "-3"}), POLICY, NOW)
    assert out.topic == "T"


def test_one_millisecond_ahead_is_held() -> None:
    out = to_timer_topic(msg({"TIMER_DELIVER_MS": str(NOW + 1)}), POLICY, NOW)
    assert out.topic == TIMER_TOPIC


def test_max_delay_is_enforced_with_a_clear_error() -> None:
    limit_ms = POLICY.max_delay_sec * 1000
    ok = to_timer_topic(msg({"TIMER_DELAY_MS": str(limit_ms)}), POLICY, NOW)
    assert ok.topic == TIMER_TOPIC
    with pytest.raises(TimerMessageIllegal, match=r"exceeds the max delay 259200000 ms") as info:
        to_timer_topic(msg({"TIMER_DELAY_MS": str(limit_ms + 1)}), POLICY, NOW)
    assert isinstance(info.value, MessageIllegal) and info.value.code == ResponseCode.MESSAGE_ILLEGAL
    short = TimerPolicy(max_delay_sec=60)
    with pytest.raises(TimerMessageIllegal, match="timer_max_delay_sec=60"):
        to_timer_topic(msg({"TIMER_DELIVER_MS": str(NOW + 61_000)}), short, NOW)


@pytest.mark.parametrize(
    "raw", ["", "abc", " 5", "5 ", "1.5", "0x10", "9" * 20, "9223372036854775808", "1_000"]
)
def test_values_that_are_not_java_longs_are_refused(raw: str) -> None:
    # An empty value never reaches the parser: the properties codec drops empty values.
    m = BrokerMessage(topic="T", body=b"x", properties=f"TIMER_DELIVER_MS\x01{raw}\x02".encode())
    if not raw:
        assert to_timer_topic(m, POLICY, NOW) is m
        return
    with pytest.raises(TimerMessageIllegal, match="TIMER_DELIVER_MS"):
        to_timer_topic(m, POLICY, NOW)


def test_a_plus_sign_is_accepted_like_java() -> None:
    assert to_timer_topic(msg({"TIMER_DELAY_SEC": "+5"}), POLICY, NOW).topic == TIMER_TOPIC


def test_disabled_timers_refuse_timer_messages_but_not_others() -> None:
    off = TimerPolicy(enabled=False)
    with pytest.raises(TimerMessageIllegal, match="timer_wheel_enable is false"):
        to_timer_topic(msg({"TIMER_DELAY_SEC": "5"}), off, NOW)
    plain = msg({"KEYS": "k"})
    assert to_timer_topic(plain, off, NOW) is plain


@pytest.mark.parametrize(
    ("props", "topic", "sys_flag"),
    [
        ({"TIMER_DELAY_SEC": "5", "TIMER_OUT_MS": "1"}, "T", 0),  # went through a timer already
        ({"TIMER_DELAY_SEC": "5"}, TIMER_TOPIC, 0),  # a rolled copy
        ({"TIMER_DELAY_SEC": "5"}, "RMQ_SYS_TRANS_HALF_TOPIC", 0),  # a transaction half message
        ({"TIMER_DELAY_SEC": "5"}, "T", rec.TRANSACTION_PREPARED_TYPE),
        ({"TIMER_DELAY_SEC": "5"}, "T", rec.TRANSACTION_ROLLBACK_TYPE),
    ],
)
def test_messages_that_are_not_converted(props: dict[str, str], topic: str, sys_flag: int) -> None:
    m = msg(props, topic=topic, sys_flag=sys_flag)
    assert to_timer_topic(m, POLICY, NOW) is m


def test_a_committed_transaction_message_is_converted() -> None:
    m = msg({"TIMER_DELAY_SEC": "5"}, sys_flag=rec.TRANSACTION_COMMIT_TYPE)
    assert to_timer_topic(m, POLICY, NOW).topic == TIMER_TOPIC


def test_may_be_timer_prefilter() -> None:
    assert may_be_timer(b"TIMER_DELIVER_MS\x011\x02")
    assert may_be_timer(b"KEYS\x01a\x02__STARTDELIVERTIME\x011\x02")
    assert not may_be_timer(b"KEYS\x01a\x02TAGS\x01b\x02")


def stored(props: dict[str, str], topic: str = TIMER_TOPIC) -> MessageExt:
    return MessageExt(
        topic=topic,
        body=b"payload",
        properties=props,
        flag=3,
        queue_id=0,
        sys_flag=rec.BORNHOST_V6_FLAG,
        born_timestamp=NOW - 100,
        born_host="10.1.2.3:4567",
        store_timestamp=NOW - 50,
        reconsume_times=2,
    )


def test_time_up_message_goes_to_its_real_topic_with_rocketmq_properties() -> None:
    ext = stored({"REAL_TOPIC": "Orders", "REAL_QID": "5", "TIMER_OUT_MS": "9", "UNIQ_KEY": "U", "TAGS": "t"})
    out = timer_time_up(ext, NOW)
    assert out is not None
    assert (out.topic, out.queue_id, out.body, out.flag) == ("Orders", 5, b"payload", 3)
    assert (out.born_timestamp, out.reconsume_times) == (NOW - 100, 2)
    assert out.sys_flag & rec.BORNHOST_V6_FLAG == 0
    assert props_of(out) == {
        "TIMER_OUT_MS": "9",
        "UNIQ_KEY": "U",
        "TAGS": "t",
        "TIMER_ENQUEUE_MS": str(NOW - 50),
        "TIMER_DEQUEUE_MS": str(NOW),
    }


@pytest.mark.parametrize(
    "props", [{"REAL_QID": "1"}, {"REAL_TOPIC": "T"}, {"REAL_TOPIC": "T", "REAL_QID": "x"}]
)
def test_time_up_without_a_real_destination_is_none(props: dict[str, str]) -> None:
    assert timer_time_up(stored(props), NOW) is None


def test_roll_writes_a_copy_into_the_timer_topic_counting_rolls() -> None:
    ext = stored({"REAL_TOPIC": "T", "REAL_QID": "0", "TIMER_OUT_MS": "9"})
    first = timer_roll(ext, NOW)
    assert first.topic == TIMER_TOPIC and first.queue_id == 0
    assert props_of(first)["TIMER_ROLL_TIMES"] == "1" and props_of(first)["REAL_TOPIC"] == "T"
    ext.properties = props_of(first)
    assert props_of(timer_roll(ext, NOW))["TIMER_ROLL_TIMES"] == "2"


def test_snapshot_round_trip() -> None:
    keys = [(NOW + i) << 64 | (i * 1000) for i in range(50)]
    cq_offset, back = decode_snapshot(encode_snapshot(42, keys))
    assert cq_offset == 42 and back == keys
    assert decode_snapshot(encode_snapshot(0, [])) == (0, [])


def test_snapshot_damage_is_detected() -> None:
    data = encode_snapshot(7, [NOW << 64 | 5, (NOW + 1) << 64 | 6])
    with pytest.raises(SnapshotError, match="shorter"):
        decode_snapshot(data[:10])
    with pytest.raises(SnapshotError, match="not a timer snapshot"):
        decode_snapshot(b"XXXX" + data[4:])
    with pytest.raises(SnapshotError, match="claims 2 entries"):
        decode_snapshot(data[:-1])
    flipped = bytearray(data)
    flipped[-1] ^= 1
    with pytest.raises(SnapshotError, match="CRC"):
        decode_snapshot(bytes(flipped))


def test_store_config_timer_fields_map_from_broker_conf() -> None:
    cfg = from_rocketmq_properties(
        StoreConfig,
        {
            "timerMaxDelaySec": "600",
            "timerPrecisionMs": "100",
            "timerWheelEnable": "false",
            "timerRollWindowSlot": "30",
        },
    )
    assert (cfg.timer_max_delay_sec, cfg.timer_precision_ms) == (600, 100)
    assert cfg.timer_wheel_enable is False and cfg.timer_roll_window_slot == 30
    defaults = StoreConfig()
    assert (defaults.timer_max_delay_sec, defaults.timer_precision_ms) == (259_200, 1000)
    with pytest.raises(ConfigError, match="timer_precision_ms=0"):
        StoreConfig(timer_precision_ms=0)

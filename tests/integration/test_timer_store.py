"""Timed delivery through a real MessageStore: holding, order, restarts, snapshots, rolling.

"Not visible before its time" is checked with store times: a delivered copy is a new record whose
store timestamp is taken when it is appended, and dispatch makes it visible only after that, so a
store timestamp at or after the requested time proves it was not readable earlier. Every wait is
on a condition with a deadline.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time

import pytest

from _support.wait import wait_until
from rocketq.config import StoreConfig
from rocketq.errors import TimerMessageIllegal
from rocketq.message import Message, MessageExt, UniqueIdGenerator
from rocketq.store import MessageStore
from rocketq.store.record_scan import SCHEDULE_TOPIC
from rocketq.store.timer import TIMER_TOPIC, decode_snapshot, encode_snapshot

WAIT_S = 20.0
_ids = UniqueIdGenerator()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def timed(topic: str, body: bytes, props: dict[str, str]) -> Message:
    return Message(topic, body, properties={"UNIQ_KEY": _ids.next_id(), **props})


def read_all(store: MessageStore, topic: str, queue_id: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = 0
    while offset < store.get_max_offset(topic, queue_id):
        got = store.get_message("G", topic, queue_id, offset, 32)
        out.extend(got.messages)
        offset = got.next_begin_offset
    return out


def timer_queue_size(store: MessageStore) -> int:
    return store.get_max_offset(TIMER_TOPIC, 0)


@pytest.mark.slow
def test_timers_become_visible_in_time_order_and_not_before(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as s:
        base = now_ms()
        plan = [(b"two", 2000), (b"point-three", 300), (b"one", 1000)]
        deliver = {}
        ids = {}
        for body, delay in plan:
            m = timed("Late", body, {"TIMER_DELIVER_MS": str(base + delay)})
            r = s.put_message(m, queue_id=2)
            deliver[body] = base + delay
            ids[body] = m.properties["UNIQ_KEY"]
            held = s.look_message_by_offset(r.physical_offset)
            assert held is not None and held.topic == TIMER_TOPIC and held.queue_id == 0
        assert s.wait_dispatched()
        assert s.get_max_offset("Late", 2) == 0 and timer_queue_size(s) == 3
        wait_until(lambda: s.get_max_offset("Late", 2) == 3, "Late/2 to reach offset 3", WAIT_S, 0.005)
        got = read_all(s, "Late", 2)
        assert [m.body for m in got] == [b"point-three", b"one", b"two"]
        for m in got:
            assert m.store_timestamp >= deliver[m.body], f"{m.body!r} stored before its time"
            # Delivered within one precision step (plus scheduling slack on a busy machine).
            assert m.store_timestamp < deliver[m.body] + 1000 + 3000
            assert m.uniq_key == ids[m.body]  # the client message id does not change
            assert m.properties["TIMER_DELIVER_MS"] == str(deliver[m.body])
            assert "REAL_TOPIC" not in m.properties and "REAL_QID" not in m.properties
            assert int(m.properties["TIMER_OUT_MS"]) + 1000 >= deliver[m.body]
            assert "TIMER_ENQUEUE_MS" in m.properties and "TIMER_DEQUEUE_MS" in m.properties
        assert s.timer is not None and s.timer.delivered == 3 and s.timer.pending == 0
        # The real-topic copy is found by its unique key, the timer copy stays in the timer topic.
        found = s.query_messages_by_key("Late", ids[b"one"]).messages
        assert [m.body for m in found] == [b"one"]


def test_relative_and_ons_properties_and_past_times(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, timer_precision_ms=100)
    with MessageStore(cfg) as s:
        start = now_ms()
        s.put_messages(
            [
                timed("R", b"sec", {"TIMER_DELAY_SEC": "1"}),
                timed("R", b"ms", {"TIMER_DELAY_MS": "400"}),
                timed("R", b"ons", {"__STARTDELIVERTIME": str(start + 700)}),
                timed("R", b"past", {"TIMER_DELIVER_MS": str(start - 60_000)}),
                timed("R", b"plain", {}),
            ],
            queue_id=1,
        )
        assert s.wait_dispatched()
        first = read_all(s, "R", 1)
        # Past and plain are stored in the real topic at once; the past one keeps its property.
        assert [m.body for m in first][:2] == [b"past", b"plain"]
        assert first[0].properties["TIMER_DELIVER_MS"] == str(start - 60_000)
        assert "TIMER_OUT_MS" not in first[0].properties
        wait_until(lambda: s.get_max_offset("R", 1) == 5, "R/1 to reach offset 5", WAIT_S, 0.005)
        later = read_all(s, "R", 1)[2:]
        assert [m.body for m in later] == [b"ms", b"ons", b"sec"]
        assert later[0].store_timestamp >= start + 400
        assert later[1].store_timestamp >= start + 700
        assert later[2].store_timestamp >= start + 1000


def test_delay_level_wins_over_timer_properties(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as s:
        m = timed("D", b"lvl", {"TIMER_DELAY_SEC": "1"})
        m.delay_level = 1
        r = s.put_message(m)
        held = s.look_message_by_offset(r.physical_offset)
        assert held is not None and held.topic == SCHEDULE_TOPIC
        assert "TIMER_DELAY_SEC" not in held.properties and held.properties["DELAY"] == "1"
        assert timer_queue_size(s) == 0


def test_too_long_delay_is_refused_and_nothing_is_written(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, timer_max_delay_sec=10)
    with MessageStore(cfg) as s:
        end = s.get_max_phy_offset()
        with pytest.raises(TimerMessageIllegal, match="exceeds the max delay 10000 ms"):
            s.put_message(timed("X", b"far", {"TIMER_DELAY_SEC": "11"}))
        with pytest.raises(TimerMessageIllegal, match="not a 64-bit integer"):
            s.put_messages([timed("X", b"ok", {}), timed("X", b"bad", {"TIMER_DELIVER_MS": "soon"})])
        assert s.get_max_phy_offset() == end and s.stats.put_failures == 2
        s.put_message(timed("X", b"near", {"TIMER_DELAY_SEC": "10"}))
        assert s.get_max_phy_offset() > end


def test_a_new_timer_wakes_a_service_sleeping_on_a_far_one(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, timer_snapshot_interval_ms=600_000)
    with MessageStore(cfg) as s:
        s.put_message(timed("W", b"far", {"TIMER_DELAY_SEC": "3600"}))
        assert s.timer is not None
        wait_until(
            lambda: s.timer is not None and s.timer.pending == 1, "1 pending timer message", WAIT_S, 0.005
        )
        start = now_ms()
        s.put_message(timed("W", b"near", {"TIMER_DELAY_MS": "300"}))
        wait_until(lambda: s.get_max_offset("W", 0) == 1, "W/0 to reach offset 1", 10, 0.005)
        assert [m.body for m in read_all(s, "W", 0)] == [b"near"]
        assert read_all(s, "W", 0)[0].store_timestamp >= start + 300
        assert s.timer.pending == 1


@pytest.mark.slow
def test_pending_timers_survive_a_clean_restart_and_are_delivered_once(store_config: StoreConfig) -> None:
    cfg = dataclasses.replace(store_config, timer_precision_ms=100)
    start = now_ms()
    with MessageStore(cfg) as s:
        for i in range(5):
            s.put_message(timed("C", f"c{i}".encode(), {"TIMER_DELIVER_MS": str(start + 1500 + 100 * i)}))
        assert s.wait_dispatched()
        wait_until(
            lambda: s.timer is not None and s.timer.pending == 5, "5 pending timer messages", WAIT_S, 0.005
        )
    snapshot = pathlib.Path(cfg.store_path_root_dir, "timer", "pending")
    cq_offset, keys = decode_snapshot(snapshot.read_bytes())
    assert cq_offset == 5 and len(keys) == 5
    with MessageStore(cfg) as again:
        assert again.timer is not None and again.timer.pending == 5
        wait_until(lambda: again.get_max_offset("C", 0) == 5, "C/0 to reach offset 5", WAIT_S, 0.005)
        got = read_all(again, "C", 0)
        assert [m.body for m in got] == [f"c{i}".encode() for i in range(5)]
        for i, m in enumerate(got):
            assert m.store_timestamp >= start + 1500 + 100 * i
        assert again.timer.pending == 0
    with MessageStore(cfg) as third:  # nothing is delivered a second time
        assert third.timer is not None and third.timer.pending == 0
        assert third.wait_dispatched()
        assert third.get_max_offset("C", 0) == 5


def test_damaged_snapshot_falls_back_to_the_previous_one(store_config: StoreConfig) -> None:
    start = now_ms()
    with MessageStore(store_config) as s:
        s.put_message(timed("F", b"a", {"TIMER_DELIVER_MS": str(start + 3_600_000)}))
        assert s.wait_dispatched()
    with MessageStore(store_config) as s:
        s.put_message(timed("F", b"b", {"TIMER_DELIVER_MS": str(start + 7_200_000)}))
        assert s.wait_dispatched()
    path = pathlib.Path(store_config.store_path_root_dir, "timer", "pending")
    path.write_bytes(path.read_bytes()[:-3])  # torn
    with MessageStore(store_config) as s:
        assert s.timer is not None
        # The backup held "a" and queue offset 1; "b" is read again from the timer queue.
        wait_until(
            lambda: s.timer is not None and s.timer.pending == 2, "2 pending timer messages", WAIT_S, 0.005
        )
        due = s.timer.next_due_ms()
        assert due is not None and start + 3_600_000 <= due < start + 3_601_000
    # Neither file: the whole timer queue is read again.
    os.unlink(path)
    os.unlink(str(path) + ".bak")
    with MessageStore(store_config) as s:
        wait_until(
            lambda: s.timer is not None and s.timer.pending == 2, "2 pending timer messages", WAIT_S, 0.005
        )


def test_a_stale_snapshot_entry_never_delivers_another_message(store_config: StoreConfig) -> None:
    with MessageStore(store_config) as s:
        plain = s.put_message(timed("P", b"not-a-timer", {}))
        assert s.wait_dispatched()
    path = pathlib.Path(store_config.store_path_root_dir, "timer", "pending")
    past = now_ms() - 1000
    beyond = 1 << 40  # past the CommitLog end: dropped on load
    path.write_bytes(encode_snapshot(0, [past << 64 | plain.physical_offset, past << 64 | beyond]))
    with MessageStore(store_config) as s:
        assert s.timer is not None
        wait_until(
            lambda: s.timer is not None and s.timer.pending == 0 and s.timer.skipped == 1,
            "the skipped timer message",
            WAIT_S,
            0.005,
        )
        assert s.timer.delivered == 0
        assert s.wait_dispatched()
        assert s.get_max_offset("P", 0) == 1


def test_long_timers_roll_into_fresh_copies_then_deliver_once(store_config: StoreConfig) -> None:
    # A 300 ms roll window (3 slots of 100 ms): a timer 1.2 s ahead is written again a few times.
    cfg = dataclasses.replace(store_config, timer_precision_ms=100, timer_roll_window_slot=3)
    with MessageStore(cfg) as s:
        start = now_ms()
        s.put_message(timed("L", b"long", {"TIMER_DELIVER_MS": str(start + 1200)}))
        wait_until(lambda: s.get_max_offset("L", 0) == 1, "L/0 to reach offset 1", WAIT_S, 0.005)
        (m,) = read_all(s, "L", 0)
        assert m.store_timestamp >= start + 1200
        assert int(m.properties["TIMER_ROLL_TIMES"]) >= 2
        assert s.timer is not None and s.timer.rolled == int(m.properties["TIMER_ROLL_TIMES"])
        assert timer_queue_size(s) == 1 + s.timer.rolled
        assert s.timer.pending == 0

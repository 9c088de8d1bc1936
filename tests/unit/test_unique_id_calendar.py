"""The time field of client unique ids (``UNIQ_KEY``) at the edges of the calendar.

RocketMQ's ``MessageClientIDSetter`` writes ``(int) (now - monthStart)`` with the month taken in
local time. A 31-day month holds 2,678,400,000 ms, more than 2^31 - 1, so from about 20:31 on the
25th the Java int is negative. Both writers of this layout (the product's
:class:`~rocketq.message.UniqueIdGenerator` and the test fixture that builds an Apache RocketMQ
store by hand) are checked here with a fixed clock and a fixed time zone, never with today's date.
"""

from __future__ import annotations

import datetime as dt
import struct
import time
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import pytest

from _support.rocketmq_fixture import client_unique_id
from rocketq.message import UniqueIdGenerator

IP = bytes([10, 0, 0, 1])
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


@pytest.fixture(params=["UTC", "Europe/Berlin", "America/Sao_Paulo", "Asia/Shanghai"])
def local_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with the process's local time zone set to ``request.param``."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


def epoch_ms(zone: str, *fields: int) -> int:
    """Epoch milliseconds of a local wall-clock time (year, month, day, h, m, s, ms) in ``zone``."""
    *head, ms = fields
    local = dt.datetime(*head, tzinfo=ZoneInfo(zone))  # type: ignore[misc]
    return int(local.timestamp()) * 1000 + ms


def java_int(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def time_field(uid: str) -> int:
    """The signed int32 at bytes 10..14 of an IPv4 unique id, as Java reads it back."""
    return int(struct.unpack(">i", bytes.fromhex(uid)[10:14])[0])


# (label, local wall clock, expected ms since the local month's start without the Java cast)
CASES = [
    ("first ms of a 31-day month", (2026, 10, 1, 0, 0, 0, 0), 0),
    ("last ms before the wrap", (2026, 3, 25, 20, 31, 23, 647), 2**31 - 1),
    ("first ms after the wrap", (2026, 3, 25, 20, 31, 23, 648), 2**31),
    ("last ms of a 31-day month", (2026, 12, 31, 23, 59, 59, 999), 31 * DAY_MS - 1),
    ("last ms of a 28-day February", (2026, 2, 28, 23, 59, 59, 999), 28 * DAY_MS - 1),
    ("last ms of a 29-day February", (2028, 2, 29, 23, 59, 59, 999), 29 * DAY_MS - 1),
    ("first ms of a year", (2027, 1, 1, 0, 0, 0, 0), 0),
]


def dst_shift_ms(zone: str, wall: tuple[int, ...]) -> int:
    """How much longer than its wall-clock reading the span from the month's start to ``wall`` is
    (an hour less in a month that springs forward before ``wall``, an hour more in one that falls
    back)."""
    start = dt.datetime(wall[0], wall[1], 1, tzinfo=ZoneInfo(zone))
    at = dt.datetime(*wall[:6], tzinfo=ZoneInfo(zone))  # type: ignore[misc]
    offset_start = start.utcoffset()
    offset_at = at.utcoffset()
    assert offset_start is not None and offset_at is not None
    return int((offset_start - offset_at).total_seconds() * 1000)


@pytest.mark.parametrize(("label", "wall", "since_month"), CASES, ids=[c[0] for c in CASES])
def test_generator_time_field_is_java_int_of_ms_since_local_month_start(
    local_zone: str, label: str, wall: tuple[int, ...], since_month: int
) -> None:
    now = epoch_ms(local_zone, *wall)
    expected = java_int(since_month + dst_shift_ms(local_zone, wall))
    uid = UniqueIdGenerator(IP, clock_ms=lambda: now).next_id()
    assert len(uid) == 32
    assert time_field(uid) == expected, label


@pytest.mark.parametrize(("label", "wall", "since_month"), CASES, ids=[c[0] for c in CASES])
def test_fixture_time_field_matches_the_generator(
    local_zone: str, label: str, wall: tuple[int, ...], since_month: int
) -> None:
    now = epoch_ms(local_zone, *wall)
    expected = java_int(since_month + dst_shift_ms(local_zone, wall))
    uid = client_unique_id(IP, pid=4242, loader_hash=0x1234ABCD, born_ms=now, counter=7)
    assert time_field(uid) == expected, label
    ours = UniqueIdGenerator(IP, clock_ms=lambda: now).next_id()
    assert uid[20:28] == ours[20:28]


def test_wrap_is_negative_from_the_25th_on_in_a_31_day_month(local_zone: str) -> None:
    before = epoch_ms(local_zone, 2026, 12, 25, 20, 0, 0, 0)
    after = epoch_ms(local_zone, 2026, 12, 25, 21, 0, 0, 0)
    assert time_field(UniqueIdGenerator(IP, clock_ms=lambda: before).next_id()) > 0
    assert time_field(UniqueIdGenerator(IP, clock_ms=lambda: after).next_id()) < 0


def test_generator_rolls_to_the_next_month_with_one_instance(local_zone: str) -> None:
    clock = [epoch_ms(local_zone, 2026, 1, 31, 23, 59, 59, 999)]
    gen = UniqueIdGenerator(IP, clock_ms=lambda: clock[0])
    last_of_january = time_field(gen.next_id())
    assert last_of_january == java_int(31 * DAY_MS - 1)
    clock[0] += 1
    assert time_field(gen.next_id()) == 0
    clock[0] = epoch_ms(local_zone, 2026, 3, 1, 0, 0, 0, 5)  # a jump over all of February
    assert time_field(gen.next_id()) == 5
    clock[0] = epoch_ms(local_zone, 2026, 2, 14, 12, 0, 0, 0)  # the clock set back a month
    assert time_field(gen.next_id()) == 13 * DAY_MS + 12 * HOUR_MS


def test_next_ids_are_what_next_id_gives_in_a_row_within_one_millisecond() -> None:
    now = 1_800_000_000_000
    one, many = UniqueIdGenerator(IP, clock_ms=lambda: now), UniqueIdGenerator(IP, clock_ms=lambda: now)
    many._prefix, many._seq = one._prefix, [0xFFFE]  # the counter wraps at 16 bits
    one._seq = [0xFFFE]
    assert many.next_ids(4) == [one.next_id() for _ in range(4)]
    assert [uid[-4:] for uid in many.next_ids(2)] == ["0002", "0003"]
    assert many.next_ids(0) == []

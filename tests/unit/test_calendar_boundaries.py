"""Behaviour that depends on the local calendar, checked at month, year and daylight-saving edges
with a fixed clock and a fixed time zone (never today's date, never the machine's zone).

- :mod:`rocketq.wallclock`: local wall-clock times to instants as ``java.util.Calendar`` resolves
  them (the later instant of a repeated hour, the pre-change offset in a skipped one).
- Client unique ids (``MessageClientIDSetter``): the time field counts from local midnight on the
  first of the month with *that* midnight's UTC offset, so in a month whose clocks have changed it
  is an hour shorter or longer than the wall-clock reading.
- mqadmin's ``resetOffsetByTime -s yyyy-MM-dd#HH:mm:ss:SSS``.
- IndexFile names (``yyyyMMddHHmmssSSS`` in local time) when the local clock repeats an hour and at
  the turn of a year.
- The broker's daily TPS counters at the turn of a month and a year; the Spark jobs' ``--from`` and
  ``--to`` times (UTC unless an offset is given, whatever the local zone).
"""

from __future__ import annotations

import datetime as dt
import pathlib
import struct
import time
from collections.abc import Callable, Iterator
from zoneinfo import ZoneInfo

import pytest

from _support.rocketmq_fixture import client_unique_id
from rocketq.broker.stats import TpsSampler
from rocketq.client.admin import parse_reset_timestamp
from rocketq.config import StoreConfig
from rocketq.errors import InvalidParameter
from rocketq.message import UniqueIdGenerator
from rocketq.spark.jobs.cli import _time_ms
from rocketq.store.index_file import IndexService, time_millis_to_file_name
from rocketq.store.record_scan import DispatchRequest
from rocketq.store.retention import is_delete_hour
from rocketq.wallclock import local_month_bounds_ms, local_to_epoch_ms

UTC = dt.UTC
IP = bytes([10, 0, 0, 1])
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@pytest.fixture
def set_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """``set_zone("Europe/Berlin")`` makes that the process's local time zone for the test."""

    def apply(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield apply
    monkeypatch.undo()
    time.tzset()


def utc_ms(*fields: int) -> int:
    """Epoch ms of a UTC time (year, month, day, hour, minute[, second, ms])."""
    y, mo, d, h, mi, *rest = fields
    s, ms = [*rest, 0, 0][:2]
    return int(dt.datetime(y, mo, d, h, mi, s, tzinfo=UTC).timestamp()) * 1000 + ms


def zone_month_start_ms(zone: str, year: int, month: int) -> int:
    """Local midnight on the first of the month, by the tz database (never ambiguous in these zones)."""
    return int(dt.datetime(year, month, 1, tzinfo=ZoneInfo(zone)).timestamp()) * 1000


def uid_time_field(uid: str) -> int:
    """The ms-since-month-start field of an IPv4 unique id, as the unsigned 32 bits on the wire."""
    return int(struct.unpack(">I", bytes.fromhex(uid)[10:14])[0])


# -- rocketq.wallclock ------------------------------------------------------------------------------

# (zone, local wall clock (y, m, d, h, min), the instant Java's Calendar gives, as UTC fields)
WALL_CASES = [
    # Berlin springs forward at 02:00 CET on 29 March 2026: 02:30 does not exist, read as CET
    ("Europe/Berlin", (2026, 3, 29, 2, 30), (2026, 3, 29, 1, 30)),
    ("Europe/Berlin", (2026, 3, 29, 1, 59), (2026, 3, 29, 0, 59)),
    ("Europe/Berlin", (2026, 3, 29, 3, 0), (2026, 3, 29, 1, 0)),
    # ... and falls back at 03:00 CEST on 25 October 2026: 02:30 happens twice, the second (CET) wins
    ("Europe/Berlin", (2026, 10, 25, 2, 30), (2026, 10, 25, 1, 30)),
    ("Europe/Berlin", (2026, 10, 25, 1, 59), (2026, 10, 24, 23, 59)),
    ("Europe/Berlin", (2026, 10, 25, 3, 0), (2026, 10, 25, 2, 0)),
    # New York: 8 March and 1 November 2026 at 02:00 local
    ("America/New_York", (2026, 3, 8, 2, 30), (2026, 3, 8, 7, 30)),
    ("America/New_York", (2026, 11, 1, 1, 30), (2026, 11, 1, 6, 30)),
    # Sydney, the other way round: back on 5 April 2026, forward on 4 October 2026
    ("Australia/Sydney", (2026, 4, 5, 2, 30), (2026, 4, 4, 16, 30)),
    ("Australia/Sydney", (2026, 10, 4, 2, 30), (2026, 10, 3, 16, 30)),
    # Sao Paulo sprang forward at midnight (4 November 2018): that day's 00:00 did not exist
    ("America/Sao_Paulo", (2018, 11, 4, 0, 0), (2018, 11, 4, 3, 0)),
    # the turn of a year, nothing special
    ("Asia/Shanghai", (2027, 1, 1, 0, 0), (2026, 12, 31, 16, 0)),
]


@pytest.mark.parametrize(("zone", "wall", "instant"), WALL_CASES)
def test_local_to_epoch_ms_resolves_like_java_calendar(
    set_zone: Callable[[str], None], zone: str, wall: tuple[int, ...], instant: tuple[int, ...]
) -> None:
    set_zone(zone)
    assert local_to_epoch_ms(dt.datetime(*wall)) == utc_ms(*instant)  # type: ignore[misc]
    assert local_to_epoch_ms(dt.datetime(*wall, 59, 999_999)) == utc_ms(*instant, 59, 999)  # type: ignore[misc]


def test_local_to_epoch_ms_wants_a_naive_time() -> None:
    with pytest.raises(ValueError, match="not a naive local time"):
        local_to_epoch_ms(dt.datetime(2026, 1, 1, tzinfo=UTC))


def test_month_bounds_take_each_midnight_with_its_own_offset(set_zone: Callable[[str], None]) -> None:
    set_zone("Europe/Berlin")
    # 31 March 2026, noon CEST: March began in CET (UTC+1) and April begins in CEST (UTC+2)
    assert local_month_bounds_ms(utc_ms(2026, 3, 31, 10, 0)) == (
        utc_ms(2026, 2, 28, 23, 0),
        utc_ms(2026, 3, 31, 22, 0),
    )
    assert local_month_bounds_ms(utc_ms(2026, 10, 31, 11, 0)) == (
        utc_ms(2026, 9, 30, 22, 0),
        utc_ms(2026, 10, 31, 23, 0),
    )
    # the last ms of a year belongs to December, the next to January of the next year
    new_year = utc_ms(2026, 12, 31, 23, 0)
    assert local_month_bounds_ms(new_year - 1) == (utc_ms(2026, 11, 30, 23, 0), new_year)
    assert local_month_bounds_ms(new_year) == (new_year, utc_ms(2027, 1, 31, 23, 0))


# -- client unique ids in months with a daylight-saving change ------------------------------------

# (zone, instant as UTC fields): each after its zone's change in the same local month
DST_MONTHS = [
    ("Europe/Berlin", (2026, 3, 31, 12, 0)),  # March is an hour shorter in Berlin
    ("Europe/Berlin", (2026, 3, 31, 21, 59, 59, 999)),  # the last ms of March, local
    ("Europe/Berlin", (2026, 10, 31, 12, 0)),  # October an hour longer
    ("Europe/Berlin", (2026, 10, 31, 22, 59, 59, 999)),
    ("America/New_York", (2026, 3, 20, 0, 0)),
    ("America/New_York", (2026, 11, 30, 12, 0)),
    ("Australia/Sydney", (2026, 4, 30, 0, 0)),
    ("Australia/Sydney", (2026, 10, 31, 0, 0)),
    # Asuncion sprang forward at midnight on 1 October 2017: the month began at 01:00 summer time
    ("America/Asuncion", (2017, 10, 1, 4, 0)),
    ("America/Asuncion", (2017, 10, 15, 15, 0)),
]


@pytest.mark.parametrize(("zone", "instant"), DST_MONTHS)
def test_unique_id_time_field_counts_real_ms_since_the_local_month_start(
    set_zone: Callable[[str], None], zone: str, instant: tuple[int, ...]
) -> None:
    set_zone(zone)
    now = utc_ms(*instant)
    local = dt.datetime.fromtimestamp(now / 1000, ZoneInfo(zone))
    expected = now - zone_month_start_ms(zone, local.year, local.month)
    wall_reading = (local.day - 1) * DAY_MS + (local.hour * 60 + local.minute) * 60_000 + local.second * 1000
    if expected:  # the case really crosses a change
        assert abs(expected - (wall_reading + now % 1000)) == HOUR_MS
    uid = UniqueIdGenerator(IP, clock_ms=lambda: now).next_id()
    assert uid_time_field(uid) == expected
    fixture_uid = client_unique_id(IP, pid=1, loader_hash=2, born_ms=now, counter=3)
    assert uid_time_field(fixture_uid) == expected


def test_unique_id_generator_rolls_at_local_midnight_after_a_short_month(
    set_zone: Callable[[str], None],
) -> None:
    set_zone("Europe/Berlin")
    clock = [utc_ms(2026, 3, 31, 21, 59, 59, 999)]  # 23:59:59.999 CEST, 31 March
    gen = UniqueIdGenerator(IP, clock_ms=lambda: clock[0])
    assert uid_time_field(gen.next_id()) == 31 * DAY_MS - HOUR_MS - 1
    clock[0] += 1  # 00:00 CEST, 1 April
    assert uid_time_field(gen.next_id()) == 0
    clock[0] = utc_ms(2026, 10, 31, 22, 59, 59, 999)  # 23:59:59.999 CET, 31 October
    assert uid_time_field(gen.next_id()) == 31 * DAY_MS + HOUR_MS - 1
    clock[0] += 1
    assert uid_time_field(gen.next_id()) == 0


# -- mqadmin resetOffsetByTime -s ---------------------------------------------------------------------


def test_reset_timestamp_at_the_turn_of_a_year_and_in_leap_years(set_zone: Callable[[str], None]) -> None:
    set_zone("Asia/Shanghai")
    last = parse_reset_timestamp("2026-12-31#23:59:59:999")
    assert last == utc_ms(2026, 12, 31, 15, 59, 59, 999)
    assert parse_reset_timestamp("2027-01-01#00:00:00:000") == last + 1
    assert parse_reset_timestamp("2028-02-29#12:00:00:000") == utc_ms(2028, 2, 29, 4, 0)
    with pytest.raises(InvalidParameter, match="is not 'now'"):
        parse_reset_timestamp("2026-02-29#12:00:00:000")


def test_reset_timestamp_millis_are_a_number_of_ms(set_zone: Callable[[str], None]) -> None:
    set_zone("UTC")
    base = utc_ms(2026, 5, 1, 8, 0)
    assert parse_reset_timestamp("2026-05-01#08:00:00:5") == base + 5
    assert parse_reset_timestamp("2026-05-01#08:00:00:050") == base + 50
    assert parse_reset_timestamp("2026-05-01#08:00:00:999") == base + 999
    for bad in (
        "2026-05-01#08:00:00:1234",
        "2026-05-01#08:00:00:",
        "2026-05-01#08:00:00",
        "2026-05-01#08:00:00:-1",
    ):
        with pytest.raises(InvalidParameter, match="yyyy-MM-dd#HH:mm:ss:SSS"):
            parse_reset_timestamp(bad)


def test_reset_timestamp_in_the_repeated_and_the_skipped_hour(set_zone: Callable[[str], None]) -> None:
    set_zone("Europe/Berlin")
    # 02:30 twice on 25 October 2026: mqadmin's SimpleDateFormat takes the second one (CET)
    assert parse_reset_timestamp("2026-10-25#02:30:00:000") == utc_ms(2026, 10, 25, 1, 30)
    assert parse_reset_timestamp("2026-10-25#01:59:59:999") == utc_ms(2026, 10, 24, 23, 59, 59, 999)
    # 02:30 never on 29 March 2026: read with the CET offset, the same instant as 03:30 CEST
    assert parse_reset_timestamp("2026-03-29#02:30:00:000") == utc_ms(2026, 3, 29, 1, 30)
    assert parse_reset_timestamp("2026-03-29#03:30:00:000") == utc_ms(2026, 3, 29, 1, 30)


# -- IndexFile names ------------------------------------------------------------------------------------


def index_service(tmp_path: pathlib.Path, clock: list[int]) -> IndexService:
    class Checkpoint:
        index_msg_timestamp = 0

        def flush(self) -> None:
            pass

    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), max_hash_slot_num=8, max_index_num=2)
    return IndexService(cfg, Checkpoint(), clock_ms=lambda: clock[0])  # one entry per file


def index_one(svc: IndexService, offset: int, store_ms: int) -> None:
    svc.build_index(
        DispatchRequest(
            topic="T",
            queue_id=0,
            commit_log_offset=offset,
            msg_size=100,
            tags_code=0,
            store_timestamp=store_ms,
            consume_queue_offset=0,
            keys="k",
            uniq_key=None,
            sys_flag=0,
        )
    )


def test_index_file_names_are_local_time(set_zone: Callable[[str], None]) -> None:
    set_zone("Asia/Shanghai")
    assert time_millis_to_file_name(utc_ms(2026, 12, 31, 15, 59, 59, 999)) == "20261231235959999"
    assert time_millis_to_file_name(utc_ms(2026, 12, 31, 16, 0)) == "20270101000000000"
    set_zone("Europe/Berlin")
    # both 02:30s of the fall-back night read the same
    assert time_millis_to_file_name(utc_ms(2026, 10, 25, 0, 30)) == "20261025023000000"
    assert time_millis_to_file_name(utc_ms(2026, 10, 25, 1, 30)) == "20261025023000000"


def test_index_file_names_keep_increasing_through_the_repeated_hour(
    set_zone: Callable[[str], None], tmp_path: pathlib.Path
) -> None:
    set_zone("Europe/Berlin")
    clock = [utc_ms(2026, 10, 25, 0, 30)]  # 02:30 CEST
    svc = index_service(tmp_path, clock)
    steps = [
        utc_ms(2026, 10, 25, 0, 30),  # 02:30 CEST
        utc_ms(2026, 10, 25, 0, 59, 59, 999),  # 02:59:59.999 CEST
        utc_ms(2026, 10, 25, 1, 0),  # 02:00 CET: the local clock went back an hour
        utc_ms(2026, 10, 25, 1, 30),  # 02:30 CET: a name already taken
        utc_ms(2026, 10, 25, 2, 0, 0, 5),  # 03:00:00.005 CET: past every earlier name again
    ]
    for i, now in enumerate(steps):
        clock[0] = now
        index_one(svc, 100 + i, now)
    names = [f.name for f in svc.files]
    assert names == [
        "20261025023000000",
        "20261025025959999",
        "20261025030000000",  # bumped one ms past the newest name
        "20261025030000001",
        "20261025030000005",
    ]
    svc.shutdown()


def test_index_file_name_bump_crosses_the_year(
    set_zone: Callable[[str], None], tmp_path: pathlib.Path
) -> None:
    set_zone("UTC")
    clock = [utc_ms(2026, 12, 31, 23, 59, 59, 999)]
    svc = index_service(tmp_path, clock)
    index_one(svc, 1, clock[0])
    index_one(svc, 2, clock[0])  # same ms: the name moves on by one
    assert [f.name for f in svc.files] == ["20261231235959999", "20270101000000000"]
    svc.shutdown()


# -- retention's deleteWhen hours ---------------------------------------------------------------------


def test_delete_hours_are_local_clock_hours_through_daylight_saving_nights(
    set_zone: Callable[[str], None],
) -> None:
    """As RocketMQ's ``isItTimeToDo``: the hour of the local clock, so "02" comes twice on the
    fall-back night and not at all on the spring-forward night."""
    set_zone("Europe/Berlin")

    def delete_minutes(delete_when: str, first_utc: tuple[int, ...]) -> int:
        start = utc_ms(*first_utc)
        return sum(
            is_delete_hour(delete_when, dt.datetime.fromtimestamp((start + m * 60_000) / 1000))
            for m in range(6 * 60)
        )

    assert delete_minutes("02", (2026, 10, 24, 22, 0)) == 120  # 02:00-02:59 CEST, then CET
    assert delete_minutes("03", (2026, 10, 24, 22, 0)) == 60
    assert delete_minutes("02", (2026, 3, 28, 22, 0)) == 0
    assert delete_minutes("01;03", (2026, 3, 28, 22, 0)) == 120


# -- broker daily counters, Spark job times -------------------------------------------------------


@pytest.mark.parametrize(
    ("last_day", "next_day"),
    [(dt.date(2026, 1, 31), dt.date(2026, 2, 1)), (dt.date(2026, 12, 31), dt.date(2027, 1, 1))],
)
def test_tps_sampler_starts_a_new_day_at_month_and_year_end(last_day: dt.date, next_day: dt.date) -> None:
    s = TpsSampler()
    s.sample(0.0, 100, 10, date=last_day - dt.timedelta(days=1))
    s.sample(1.0, 150, 15, date=last_day)
    s.sample(2.0, 180, 18, date=last_day)
    assert (s.today, s.put_today_morning, s.put_yesterday_morning) == (last_day, 150, 100)
    s.sample(3.0, 200, 20, date=next_day)
    assert (s.today, s.put_today_morning, s.get_today_morning) == (next_day, 200, 20)
    assert (s.put_yesterday_morning, s.get_yesterday_morning) == (150, 15)


def test_spark_job_times_are_utc_whatever_the_local_zone(set_zone: Callable[[str], None]) -> None:
    set_zone("Europe/Berlin")
    assert _time_ms("2026-10-25T02:30:00") == utc_ms(2026, 10, 25, 2, 30)
    assert _time_ms("2026-12-31T23:59:59.999") == utc_ms(2026, 12, 31, 23, 59, 59, 999)
    assert _time_ms("2027-01-01T00:00:00+01:00") == utc_ms(2026, 12, 31, 23, 0)
    assert _time_ms("1798761600000") == 1798761600000

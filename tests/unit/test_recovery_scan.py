"""The recovery scan's bulk path ends at exactly the offset the record-by-record decode ends at.

A CommitLog of mixed records (V1 and V2 topics, several body sizes, BLANK markers at segment
ends) is damaged one byte at a time at many positions; for each damage the bulk scan
(``recovery.plan_recovery``) and a plain ``iter_records`` walk with CRC checks must agree on where valid
data ends and how many records precede it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage
from rocketq.store import recovery
from rocketq.store.commitlog import CommitLog

PROPS = b"UNIQ_KEY\x010123456789ABCDEF\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02"


@pytest.fixture
def log(store_config: StoreConfig) -> Iterator[CommitLog]:
    cl = CommitLog(store_config)
    cl.load()
    cl.start()
    rnd = random.Random(7)
    for i in range(900):
        topic = "T" * 130 if i % 97 == 5 else f"Topic{i % 3}"
        body = bytes(rnd.randrange(256) for _ in range(rnd.choice((1, 40, 300, 1500))))
        cl.put_message(BrokerMessage(topic, body, PROPS, queue_id=i % 4, born_timestamp=1_700_000_000_000))
    yield cl
    cl.shutdown()


def bulk(cl: CommitLog, start: int, *, check_crc: bool = True) -> tuple[int, int]:
    plan = recovery.plan_recovery(
        cl.queue.files, cl.file_size, check_crc=check_crc, max_record=cl._max_record, start_offset=start
    )
    return plan.process_offset, plan.records_scanned


def reference(cl: CommitLog, start: int) -> tuple[int, int]:
    process, count = start, 0
    for offset, view in cl.iter_records(start, check_crc=True):
        process = offset + view.size
        count += 1
    return process, count


def test_bulk_scan_matches_the_scalar_decode_on_intact_data(log: CommitLog) -> None:
    files = log.queue.files
    assert len(files) >= 4, "the fixture must roll segments (BLANK markers) to be meaningful"
    start = files[0].file_from_offset
    expected = reference(log, start)
    assert expected[1] == 900
    assert bulk(log, start) == expected
    assert bulk(log, start, check_crc=False) == expected


def test_bulk_scan_matches_the_scalar_decode_after_damage(log: CommitLog) -> None:
    files = log.queue.files
    start = files[0].file_from_offset
    rnd = random.Random(11)
    end = log.queue.max_wrote_position
    cut_short = 0
    for _ in range(120):
        where = rnd.randrange(start, end)
        mf = log.queue.find_by_offset(where)
        assert mf is not None
        pos = where - mf.file_from_offset
        old = mf.mm[pos]
        mf.mm[pos] = old ^ (1 << rnd.randrange(8))
        try:
            expected = reference(log, start)
            assert bulk(log, start) == expected, f"damage at {where}: bulk and scalar scans disagree"
            cut_short += expected[1] < 900
        finally:
            mf.mm[pos] = old
    # Most flips land in a body, a header or a length and must end the scan early.
    assert cut_short > 60

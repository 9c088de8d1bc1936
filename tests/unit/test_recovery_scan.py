"""The recovery scan's bulk path ends at exactly the offset the record-by-record decode ends at.

A CommitLog of mixed records (V1 and V2 topics, several body sizes, BLANK markers at segment
ends) is damaged one byte at a time at many positions; for each damage the bulk scan
(``recovery.plan_recovery``) and a plain ``iter_records`` walk with CRC checks must agree on where valid
data ends and how many records precede it.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from rocketq.config import StoreConfig
from rocketq.message import BrokerMessage
from rocketq.protocol import record as rec
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


# -- the pure scan on bytes, without a store ---------------------------------------------------------
SEG = 4096


@dataclass
class BytesSegment:
    """A CommitLog segment held in memory (what plan_recovery reads of a MappedFile)."""

    file_from_offset: int
    data: bytearray
    read_position: int = SEG

    def read(self, pos: int, size: int) -> bytes | None:
        if pos < 0 or size < 0 or pos + size > self.read_position:
            return None
        return bytes(self.data[pos : pos + size])


def segments_of(count: int, *, per_segment: int = 20) -> tuple[list[BytesSegment], list[int]]:
    """``count`` segments of ``SEG`` bytes, ``per_segment`` records each then a BLANK marker
    (the last segment: records then zeros); returns the segments and every record's offset."""
    segments: list[BytesSegment] = []
    offsets: list[int] = []
    for s in range(count):
        base = s * SEG
        buf = bytearray(SEG)
        pos = 0
        for i in range(per_segment):
            raw = rec.encode_record(
                topic="T" * 130 if i == 7 else "Topic",  # one V2 record per segment
                body=bytes([i]) * (10 + i),
                properties=b"KEYS\x01k\x02",
                physical_offset=base + pos,
            )
            buf[pos : pos + len(raw)] = raw
            offsets.append(base + pos)
            pos += len(raw)
        if s < count - 1:
            buf[pos : pos + 8] = rec.encode_blank(SEG - pos)
        segments.append(BytesSegment(base, buf))
    return segments, offsets


def test_plan_of_intact_segments_keeps_everything() -> None:
    segments, offsets = segments_of(3)
    plan = recovery.plan_recovery(segments, SEG, start_index=0)
    end = offsets[-1] + rec.decode_record(segments[2].data, offsets[-1] - 2 * SEG).size
    assert plan.process_offset == end
    assert plan.records_scanned == 60
    assert plan.delete_segments == ()
    assert (plan.cut_segment, plan.cut_from, plan.cut_to) == (2 * SEG, end - 2 * SEG, SEG)
    # a segment ends where its BLANK marker is; the last one where its data ends
    blank_0 = offsets[20]  # == 4096: segment 1 starts; the BLANK of segment 0 sits after record 19
    assert blank_0 == SEG
    assert [e.file_from_offset for e in plan.segment_ends] == [0, SEG, 2 * SEG]
    assert plan.segment_ends[2].valid_end == end
    assert plan.segment_ends[0].valid_end == offsets[19] + (offsets[1] - offsets[0]) + 19
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.process_offset = 0  # type: ignore[misc]


def test_plan_after_damage_in_a_middle_segment_cuts_there_and_deletes_the_rest() -> None:
    segments, offsets = segments_of(4)
    bad = offsets[20 + 5]  # record 5 of segment 1
    body = bad - SEG + rec.decode_record(segments[1].data, bad - SEG).body_offset
    segments[1].data[body] ^= 0xFF
    plan = recovery.plan_recovery(segments, SEG, start_index=0)
    assert plan.process_offset == bad
    assert plan.records_scanned == 25
    assert plan.delete_segments == (2 * SEG, 3 * SEG)
    assert (plan.cut_segment, plan.cut_from, plan.cut_to) == (SEG, bad - SEG, SEG)
    assert plan.truncated_bytes == 4 * SEG - bad  # up to the old end of data (a full last segment)
    # without the CRC check the flipped body byte is not noticed
    assert recovery.plan_recovery(segments, SEG, start_index=0, check_crc=False).records_scanned == 80


@pytest.mark.parametrize("where", [1, 7, 19])  # a V1 record, the V2 record, the last one
def test_plan_ends_at_a_zeroed_header_in_the_last_segment(where: int) -> None:
    segments, offsets = segments_of(3)
    at = offsets[40 + where]
    segments[2].data[at - 2 * SEG : at - 2 * SEG + 8] = bytes(8)
    plan = recovery.plan_recovery(segments, SEG)  # default start: the third-last segment
    assert plan.start_offset == 0
    assert plan.process_offset == at
    assert plan.records_scanned == 40 + where
    assert plan.delete_segments == ()


def test_plan_ends_at_the_blank_when_the_first_record_of_a_segment_is_torn() -> None:
    segments, offsets = segments_of(3)
    segments[2].data[:8] = bytes(8)
    plan = recovery.plan_recovery(segments, SEG)
    blank = offsets[39] + (offsets[39] - offsets[38]) + 1  # record 19 of segment 1 is 1 B longer
    assert plan.process_offset == blank
    assert plan.records_scanned == 40
    assert plan.delete_segments == (2 * SEG,)
    assert (plan.cut_segment, plan.cut_from, plan.cut_to) == (SEG, blank - SEG, SEG)


def test_plan_from_a_segment_with_nothing_valid_ends_at_the_previous_blank() -> None:
    segments, offsets = segments_of(3)
    segments[2].data[:] = bytes(SEG)  # allocated, never written
    plan = recovery.plan_recovery(segments, SEG, start_index=2)
    blank = offsets[39] + (offsets[39] - offsets[38]) + 1  # record 19 of segment 1 is 1 B longer
    assert plan.process_offset == blank
    assert plan.records_scanned == 20  # segment 1 scanned for its BLANK
    assert plan.delete_segments == (2 * SEG,)


def test_regression_damage_before_a_segment_with_nothing_valid_keeps_the_records_after_it() -> None:
    """After a crash the scan starts at the last segment; when nothing there is valid (its start
    zeroed) the previous segment is scanned for its BLANK. A damaged record in that segment was
    the end of the valid data: the cut zeroed the intact records after it. It is resynced past
    and quarantined like damage anywhere else."""
    segments, offsets = segments_of(3)
    known_end = 2 * SEG + 600  # the checkpoint's "CommitLog flushed up to", in segment 2
    segments[2].data[:] = bytes(SEG)  # segment 2 zeroed from its start
    bad = offsets[20 + 5]  # record 5 of segment 1, its body damaged
    body = bad - SEG + rec.decode_record(segments[1].data, bad - SEG).body_offset
    segments[1].data[body] ^= 0xFF
    policy = recovery.ResyncPolicy(known_end, clean_shutdown=False)
    plan = recovery.plan_recovery(segments, SEG, start_index=2, resync=policy)
    blank = offsets[39] + (offsets[39] - offsets[38]) + 1  # record 19 of segment 1 is 1 B longer
    assert plan.start_offset == SEG
    assert plan.process_offset == blank
    assert plan.records_scanned == 19  # segment 1 without its damaged record
    assert [(q.offset, q.end, q.segment, q.records) for q in plan.quarantined] == [(bad, offsets[26], SEG, 1)]
    assert plan.delete_segments == (2 * SEG,)
    assert (plan.cut_segment, plan.cut_from, plan.cut_to) == (SEG, blank - SEG, SEG)
    # without a resync policy the first damage still ends the valid data
    assert recovery.plan_recovery(segments, SEG, start_index=2).process_offset == bad


def test_plan_of_no_segments_is_empty() -> None:
    plan = recovery.plan_recovery([], SEG)
    assert (plan.process_offset, plan.records_scanned, plan.delete_segments, plan.cut_segment) == (
        0,
        0,
        (),
        None,
    )


def test_plan_says_where_dispatch_resumes_and_whether_queues_are_cut() -> None:
    segments, offsets = segments_of(3)
    end = recovery.plan_recovery(segments, SEG).process_offset
    mid = offsets[30]

    def plan(queues_end: int, dispatched: int, clean: bool) -> recovery.RecoveryPlan:
        state = recovery.DispatchState(queues_end, dispatched, clean)
        return recovery.plan_recovery(segments, SEG, dispatch=state)

    # clean shutdown: the checkpoint's dispatched offset, unless a queue ends earlier
    assert plan(end, mid, True).redispatch_from == mid
    assert plan(offsets[10], mid, True).redispatch_from == offsets[10]
    # after a crash: where the queues end, or the checkpoint's offset when that is lower
    assert plan(end, mid, False).redispatch_from == mid
    assert plan(offsets[10], mid, False).redispatch_from == offsets[10]
    assert plan(offsets[10], -1, False).redispatch_from == offsets[10]
    assert not plan(end, mid, False).cut_queues
    # queues naming data past a torn tail are cut, and dispatch resumes no later than the new end
    torn = offsets[50]
    segments[2].data[torn - 2 * SEG : torn - 2 * SEG + 4] = bytes(4)
    cut = plan(end, end, False)
    assert (cut.process_offset, cut.cut_queues, cut.redispatch_from) == (torn, True, torn)
    # without a DispatchState nothing is redone
    assert recovery.plan_recovery(segments, SEG).redispatch_from == torn


def test_scan_notes_the_next_queue_offset_of_every_queue(log: CommitLog) -> None:
    """The bulk scan's queue_next (what the store's queue-offset table takes at least) equals
    what the record-by-record decode says, V2 records (long topics, taken record by record)
    included."""
    start = log.queue.files[0].file_from_offset
    expected: dict[tuple[str, int], int] = {}
    for _, view in log.iter_records(start, check_crc=True):
        key = (view.topic, view.queue_id)
        expected[key] = max(expected.get(key, 0), view.queue_offset + 1)
    assert any(len(topic) > 127 for topic, _ in expected)
    plan = recovery.plan_recovery(
        log.queue.files, log.file_size, max_record=log._max_record, start_offset=start
    )
    assert dict(plan.queue_next) == expected

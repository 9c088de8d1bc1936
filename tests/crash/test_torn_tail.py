"""Recovery of a damaged CommitLog tail, damaged on disk between two runs.

Every case writes messages in two runs (the ``head``, then the ``tail`` that gets damaged),
damages the segment files directly and starts the store again. Recovery must stop at the last
intact record: the max offset is its end, every record before it reads back unchanged, the bytes
after it are zero and later segments are gone, a new put lands right after it with the next queue
offset, and a further restart keeps all that.

Each case runs in two end states of the writing run:

* ``clean_shutdown``: the store was shut down (checkpoint and everything flushed, no ``abort``);
* ``killed``: the state a SIGKILL leaves: segment contents as written (a kill loses nothing of
  the page cache), the ``abort`` file present and the checkpoint file as it was before the tail
  was written (the periodic checkpoint flush had not run since).

Also: a segment file of the wrong length makes ``start`` fail with CorruptFileError naming it, a
second store on an open directory gets StoreLocked, and a record with a huge TOTALSIZE in a
segment larger than the scan window does not hang recovery.
"""

from __future__ import annotations

import os
import pathlib
import random
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from rocketq.config import StoreConfig
from rocketq.errors import CorruptFileError, StoreLocked
from rocketq.message import Message
from rocketq.protocol import record as rec
from rocketq.store import MessageStore, PutMessageResult
from rocketq.store.mapped_file import offset_to_file_name

SEG = 64 * 1024
TOPICS = ("TornA", "TornB")
QUEUES = 2


def make_config(tmp_path: pathlib.Path, segment_size: int = SEG) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=segment_size,
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=4096,
        max_index_num=16384,
    )


@dataclass(frozen=True)
class Written:
    result: PutMessageResult
    topic: str
    queue_id: int
    body: bytes
    key: str

    @property
    def offset(self) -> int:
        return self.result.physical_offset

    @property
    def end(self) -> int:
        return self.result.next_offset


def put(store: MessageStore, topic: str, queue_id: int, body: bytes, key: str) -> Written:
    result = store.put_message(Message(topic, body, keys=[key]), queue_id)
    assert result.ok, result
    return Written(result, topic, queue_id, body, key)


def put_random(store: MessageStore, rng: random.Random, count: int, tag: str) -> list[Written]:
    out = []
    for i in range(count):
        size = rng.choice((1, rng.randint(2, 300), rng.randint(301, 3 * 1024)))
        body = bytes([rng.randint(1, 255)]) + rng.randbytes(size - 1)  # never all zeros
        out.append(put(store, rng.choice(TOPICS), rng.randrange(QUEUES), body, f"{tag}-{i}"))
    return out


def put_until(store: MessageStore, rng: random.Random, offset: int, tag: str) -> list[Written]:
    """Random messages until one starts at or after physical ``offset``."""
    out: list[Written] = []
    while not out or out[-1].offset < offset:
        out += put_random(store, rng, 1, f"{tag}{len(out)}")
    return out


def segment_path(config: StoreConfig, offset: int, segment_size: int = SEG) -> str:
    return os.path.join(config.commit_log_dir, offset_to_file_name(offset - offset % segment_size))


def patch(config: StoreConfig, offset: int, data: bytes, segment_size: int = SEG) -> None:
    """Overwrite bytes at a physical offset (within one segment) in the file itself."""
    assert offset % segment_size + len(data) <= segment_size
    with open(segment_path(config, offset, segment_size), "r+b") as f:
        f.seek(offset % segment_size)
        f.write(data)


def read_raw(config: StoreConfig, offset: int, size: int) -> bytes:
    with open(segment_path(config, offset), "rb") as f:
        f.seek(offset % SEG)
        return f.read(size)


def assert_reads_back(store: MessageStore, w: Written) -> None:
    got = store.look_message_by_offset(w.offset, w.result.size)
    assert got is not None, f"{w.key} at {w.offset} is not readable"
    assert (got.topic, got.queue_id, got.queue_offset, got.body, got.keys) == (
        w.topic,
        w.queue_id,
        w.result.queue_offset,
        w.body,
        [w.key],
    ), f"{w.key} at {w.offset} changed"
    assert got.commit_log_offset == w.offset and got.store_size == w.result.size


def scan_offsets(store: MessageStore) -> list[int]:
    return [off for off, _ in store.commitlog.iter_records(store.get_min_phy_offset(), check_crc=True)]


def expected_queue_offset(intact: list[Written], topic: str, queue_id: int) -> int:
    return 1 + max(
        (w.result.queue_offset for w in intact if (w.topic, w.queue_id) == (topic, queue_id)), default=-1
    )


STATES = ("clean_shutdown", "killed")


def checkpoint_path(config: StoreConfig) -> str:
    return os.path.join(config.store_path_root_dir, "checkpoint")


def read_file_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_two_runs(
    config: StoreConfig,
    head: Callable[[MessageStore], list[Written]],
    tail: Callable[[MessageStore], list[Written]],
    state: str,
) -> tuple[list[Written], list[Written]]:
    """Write ``head`` in one run and ``tail`` in the next, then leave the files in ``state``."""
    with MessageStore(config) as store:
        head_written = head(store)
    checkpoint_before_tail = read_file_or_none(checkpoint_path(config))
    with MessageStore(config) as store:
        tail_written = tail(store)
        abort_file = store.abort_file
    if state == "killed":
        if checkpoint_before_tail is None:
            if os.path.exists(checkpoint_path(config)):
                os.unlink(checkpoint_path(config))
        else:
            with open(checkpoint_path(config), "wb") as f:
                f.write(checkpoint_before_tail)
        with open(abort_file, "w") as f:
            f.write("killed")
    else:
        assert state == "clean_shutdown"
    return head_written, tail_written


def segment_files(config: StoreConfig) -> list[str]:
    return sorted(n for n in os.listdir(config.commit_log_dir) if n.isdigit())


def recover_and_check(
    config: StoreConfig,
    intact: list[Written],
    lost: Written | None,
    state: str,
) -> None:
    """Restart on damaged files and check the store came back at the end of ``intact``.

    ``lost`` is the first record the damage destroyed (if any): a new put in its queue must reuse
    its queue offset.
    """
    end = intact[-1].end
    with MessageStore(config) as store:
        assert store.last_exit_ok == (state == "clean_shutdown")
        assert store.recovery is not None
        assert store.recovery.process_offset == end, (
            f"[{state}] recovery kept data up to {store.recovery.process_offset}, but the last intact "
            f"record ends at {end}; the damage was not detected ({store.recovery})"
        )
        assert store.get_max_phy_offset() == end
        assert scan_offsets(store) == [w.offset for w in intact]
        for w in intact:
            assert_reads_back(store, w)
        assert store.commitlog.read_record(end) is None
        assert store.look_message_by_offset(end) is None
        # The damaged bytes are gone: the rest of the segment holding the end is zero.
        tail = read_raw(config, end, SEG)
        assert len(tail) == SEG - end % SEG
        assert tail.count(0) == len(tail), "bytes after the last intact record were not zeroed"
        # No segment after the one holding the end survives.
        assert segment_files(config)[-1] == offset_to_file_name(end - end % SEG)

        topic, queue_id = (lost.topic, lost.queue_id) if lost is not None else (TOPICS[0], 0)
        next_qoff = expected_queue_offset(intact, topic, queue_id)
        if lost is not None:
            assert lost.result.queue_offset == next_qoff
        new = put(store, topic, queue_id, b"after recovery", "new")
        assert new.offset == end, f"new record at {new.offset}, expected right after the intact data at {end}"
        assert new.result.queue_offset == next_qoff
        assert_reads_back(store, new)

    with MessageStore(config) as store:
        assert store.last_exit_ok
        assert store.recovery is not None and store.recovery.process_offset == new.end
        assert store.get_max_phy_offset() == new.end
        assert scan_offsets(store) == [w.offset for w in [*intact, new]]
        for w in [*intact, new]:
            assert_reads_back(store, w)


# -- damage in the last segment ---------------------------------------------------------------
def _half_zeroed(config: StoreConfig, last: Written) -> None:
    half = last.result.size // 2
    patch(config, last.offset + half, bytes(last.result.size - half))


def _uncommitted(config: StoreConfig, last: Written) -> None:
    # The record is complete except TOTALSIZE, which the writer stores last.
    patch(config, last.offset, bytes(4))


def _size_only(config: StoreConfig, last: Written) -> None:
    patch(config, last.offset + 4, bytes(last.result.size - 4))


#: Offset of the body in a record with IPv4 born and store hosts.
BODY_OFFSET = 72 + 8 + 8


def _body_zeroed(config: StoreConfig, last: Written) -> None:
    patch(config, last.offset + BODY_OFFSET, bytes(len(last.body)))


def _body_bit_flip(config: StoreConfig, last: Written) -> None:
    pos = last.offset + BODY_OFFSET + len(last.body) // 2
    (byte,) = read_raw(config, pos, 1)
    patch(config, pos, bytes([byte ^ 0x10]))


DAMAGE_LAST: dict[str, Callable[[StoreConfig, Written], None]] = {
    "half_zeroed": _half_zeroed,
    "uncommitted_totalsize_zero": _uncommitted,
    "totalsize_only": _size_only,
    "body_zeroed": _body_zeroed,
    "body_crc_mismatch": _body_bit_flip,
}


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("damage", sorted(DAMAGE_LAST))
def test_damaged_last_record_is_cut(tmp_path: pathlib.Path, damage: str, state: str) -> None:
    rng = random.Random(f"last-{damage}")
    config = make_config(tmp_path)
    head, tail = write_two_runs(
        config,
        lambda store: put_until(store, rng, SEG + 1000, "m"),
        lambda store: [put(store, TOPICS[1], 1, bytes(range(1, 256)) * 4, "victim")],
        state,
    )
    victim = tail[0]
    assert victim.offset >= SEG, "the damage should be in a later segment than the first"
    DAMAGE_LAST[damage](config, victim)
    recover_and_check(config, head, victim, state)


@pytest.mark.parametrize("state", STATES)
def test_garbage_after_last_record_is_zeroed(tmp_path: pathlib.Path, state: str) -> None:
    rng = random.Random("garbage")
    config = make_config(tmp_path)
    head, tail = write_two_runs(
        config,
        lambda store: put_random(store, rng, 25, "h"),
        lambda store: put_random(store, rng, 5, "t"),
        state,
    )
    end = tail[-1].end
    assert end % SEG + 1500 < SEG
    garbage = b"\x13\x37\xbe\xef\xff\x00\x12\x34" + rng.randbytes(1492)
    patch(config, end, garbage)
    assert read_raw(config, end, len(garbage)) == garbage
    recover_and_check(config, head + tail, None, state)


@pytest.mark.parametrize("state", STATES)
def test_stray_bytes_beyond_a_zero_gap_are_zeroed(tmp_path: pathlib.Path, state: str) -> None:
    rng = random.Random("stray")
    config = make_config(tmp_path)
    head, tail = write_two_runs(
        config,
        lambda store: put_random(store, rng, 15, "h"),
        lambda store: put_random(store, rng, 5, "t"),
        state,
    )
    stray_at = tail[-1].end + 3000
    assert stray_at % SEG + 600 < SEG
    patch(config, stray_at, b"\xaa" * 600)
    recover_and_check(config, head + tail, None, state)


@pytest.mark.parametrize("state", STATES)
def test_fake_record_header_after_last_record(tmp_path: pathlib.Path, state: str) -> None:
    """A TOTALSIZE and magic code of a record with nothing behind them (the body never written)."""
    rng = random.Random("fake-header")
    config = make_config(tmp_path)
    head, tail = write_two_runs(
        config,
        lambda store: put_random(store, rng, 20, "h"),
        lambda store: put_random(store, rng, 5, "t"),
        state,
    )
    patch(config, tail[-1].end, struct.pack(">ii", 500, rec.MESSAGE_MAGIC_CODE))
    recover_and_check(config, head + tail, None, state)


def test_corrupt_record_past_the_checkpoint_after_a_crash_cuts_everything_after_it(
    tmp_path: pathlib.Path,
) -> None:
    """After a crash, damage past what the checkpoint says was flushed is a torn tail: cut. (After
    a clean shutdown the same damage is quarantined and the records after it kept:
    tests/crash/test_corrupt_record_resync.py.)"""
    rng = random.Random("middle")
    config = make_config(tmp_path)
    head, tail = write_two_runs(
        config,
        lambda store: put_until(store, rng, SEG + 1000, "h"),
        lambda store: put_random(store, rng, 3, "t"),
        "killed",
    )
    victim = tail[0]
    _body_bit_flip(config, victim)
    recover_and_check(config, head, victim, "killed")


# -- damage across a segment boundary ---------------------------------------------------------
def _fill_first_segment(store: MessageStore, rng: random.Random) -> list[Written]:
    """Records in the first segment until less than 4000 B are left in it."""
    written: list[Written] = []
    while SEG - (written[-1].end if written else 0) >= 4000:
        body = bytes([1]) + rng.randbytes(rng.randint(200, 600))
        written.append(put(store, TOPICS[0], len(written) % QUEUES, body, f"m-{len(written)}"))
    return written


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("second_segment", ["partial_record", "never_written"])
def test_torn_record_at_segment_boundary(tmp_path: pathlib.Path, second_segment: str, state: str) -> None:
    rng = random.Random(f"boundary-{second_segment}")
    config = make_config(tmp_path)
    holder: list[int] = []

    def roll(store: MessageStore) -> list[Written]:
        left = SEG - store.get_max_phy_offset()
        holder.append(left)
        return [put(store, TOPICS[1], 0, bytes([2]) + rng.randbytes(left), "rolled")]

    first, (rolled,) = write_two_runs(config, lambda store: _fill_first_segment(store, rng), roll, state)
    end = first[-1].end
    assert rolled.offset == SEG, "the large record should have rolled to the second segment"
    assert holder[0] == SEG - end >= 500, "room must be left for a small record in the first segment"
    (blank_size, magic) = struct.unpack(">ii", read_raw(config, end, 8))
    assert (blank_size, magic) == (SEG - end, rec.BLANK_MAGIC_CODE), "the first segment should end in a BLANK"
    if second_segment == "partial_record":
        # Killed mid-append: TOTALSIZE not yet written, only the first half of the rest.
        patch(config, SEG, bytes(4))
        half = rolled.result.size // 2
        patch(config, SEG + half, bytes(rolled.result.size - half))
    else:
        patch(config, SEG, bytes(rolled.result.size))
    # A pre-created, never used third segment, as the allocator leaves it after a kill.
    with open(segment_path(config, 2 * SEG), "wb") as f:
        f.truncate(SEG)

    recover_and_check(config, first, rolled, state)

    # A record that does not fit rolls again, into a freshly created second segment.
    with MessageStore(config) as store:
        tail_end = store.get_max_phy_offset()
        big = put(store, TOPICS[1], 1, bytes([3]) * (SEG - end), "big-after")
        assert big.offset == SEG
        assert struct.unpack(">ii", read_raw(config, tail_end, 8)) == (SEG - tail_end, rec.BLANK_MAGIC_CODE)
        assert_reads_back(store, big)
    with MessageStore(config) as store:
        assert store.get_max_phy_offset() == big.end
        assert scan_offsets(store)[-1] == big.offset
        for w in [*first, big]:
            assert_reads_back(store, w)


# -- a TOTALSIZE larger than the scan window --------------------------------------------------
_RECOVER_SCRIPT = textwrap.dedent(
    """
    import sys
    from rocketq.config import StoreConfig
    from rocketq.store import MessageStore

    config = StoreConfig(
        store_path_root_dir=sys.argv[1], mapped_file_size_commit_log=int(sys.argv[2]),
        flush_disk_type="SYNC_FLUSH", mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=4096, max_index_num=16384,
    )
    with MessageStore(config) as store:
        print(store.get_max_phy_offset())
    """
)


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("layout", ["small_records", "records_straddling_the_window"])
def test_huge_totalsize_in_large_segment_does_not_hang_recovery(
    tmp_path: pathlib.Path, layout: str, state: str
) -> None:
    """TOTALSIZE of the last record overwritten with 6 MiB (magic intact) in an 8 MiB segment.

    The scan reads a segment in windows of a bit more than 4 MiB and reads again from a record
    that straddles a window. A record claiming to be larger than a whole window must end the
    scan as corrupt, not be read again forever; intact records that straddle a window must
    still be kept.
    """
    big_segment = 8 << 20
    config = make_config(tmp_path, big_segment)
    rng = random.Random(f"huge-{layout}")

    def head(store: MessageStore) -> list[Written]:
        if layout == "small_records":
            return put_random(store, rng, 10, "m")
        return [put(store, TOPICS[i % 2], 0, bytes([i + 1]) * (256 << 10), f"big-{i}") for i in range(17)]

    written, tail = write_two_runs(config, head, lambda store: put_random(store, rng, 1, "victim"), state)
    if layout != "small_records":
        window = max(4 << 20, config.max_message_size + 64 * 1024 + 8)
        assert any(w.offset < window < w.end for w in written)
    patch(config, tail[0].offset, struct.pack(">i", 6 << 20), big_segment)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _RECOVER_SCRIPT, config.store_path_root_dir, str(big_segment)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("recovery did not finish within 20 s: the scan loops on the oversized record")
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) == written[-1].end
    with MessageStore(config) as store:
        assert store.get_max_phy_offset() == written[-1].end
        assert [off for off, _ in store.commitlog.iter_records(0, check_crc=True)] == [
            w.offset for w in written
        ]
        for w in written:
            assert_reads_back(store, w)
        assert store.commitlog.read_record(written[-1].end) is None


# -- segment files of the wrong length --------------------------------------------------------
@pytest.mark.parametrize(
    ("which", "new_size"),
    [("last", 1000), ("last", SEG + 1), ("first", SEG - 4096), ("first", 0)],
    ids=["last_short", "last_long", "first_short", "first_empty"],
)
def test_segment_with_wrong_length_fails_start(tmp_path: pathlib.Path, which: str, new_size: int) -> None:
    rng = random.Random(f"length-{which}-{new_size}")
    config = make_config(tmp_path)
    with MessageStore(config) as store:
        written = put_until(store, rng, SEG + 1000, "m")
    names = sorted(os.listdir(config.commit_log_dir))
    assert len(names) >= 2
    path = os.path.join(config.commit_log_dir, names[-1] if which == "last" else names[0])
    with open(path, "rb") as f:
        original = f.read()
    with open(path, "r+b") as f:
        f.truncate(new_size)

    store = MessageStore(config)
    with pytest.raises(CorruptFileError) as excinfo:
        store.start()
    assert path in str(excinfo.value)
    assert str(new_size) in str(excinfo.value)
    assert not store.started
    assert not os.path.exists(store.abort_file)
    with open(path, "rb") as f:
        assert len(f.read()) == new_size, "a failed start must not touch the file"

    # Put the file back: the failed start released the lock and changed nothing else.
    with open(path, "wb") as f:
        f.write(original)
    with MessageStore(config) as store:
        assert store.last_exit_ok
        assert store.get_max_phy_offset() == written[-1].end
        for w in written:
            assert_reads_back(store, w)


def test_empty_trailing_segment_is_dropped(tmp_path: pathlib.Path) -> None:
    """A zero-length file after the last segment (a kill while creating it) is not an error."""
    rng = random.Random("empty-trailing")
    config = make_config(tmp_path)
    with MessageStore(config) as store:
        written = put_random(store, rng, 30, "m")
    next_start = written[-1].offset - written[-1].offset % SEG + SEG
    open(segment_path(config, next_start), "wb").close()
    recover_and_check(config, written, None, "clean_shutdown")
    assert not os.path.exists(segment_path(config, next_start))


# -- directory lock ---------------------------------------------------------------------------
def test_second_store_on_open_directory_is_locked_out(tmp_path: pathlib.Path) -> None:
    config = make_config(tmp_path)
    with MessageStore(config) as first:
        a = put(first, TOPICS[0], 0, b"first", "a")
        second = MessageStore(config)
        with pytest.raises(StoreLocked) as excinfo:
            second.start()
        assert config.store_path_root_dir in str(excinfo.value)
        assert not second.started
        # The refused opener changed nothing: the first store keeps its lock and keeps working.
        with pytest.raises(StoreLocked):
            MessageStore(config).start()
        b = put(first, TOPICS[0], 0, b"second", "b")
        assert b.result.queue_offset == a.result.queue_offset + 1
        assert os.path.exists(first.abort_file)
    with MessageStore(config) as again:
        assert again.last_exit_ok
        assert_reads_back(again, a)
        assert_reads_back(again, b)

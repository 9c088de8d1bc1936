"""The compiled batch plan turns down every batch the general path must handle itself, and a
packed batch is still a list of messages for whoever needs one."""

from __future__ import annotations

import os
import zlib

import pytest

from rocketq.message import create_offset_msg_id, pack_socket_addr
from rocketq.protocol.batch import encode_batch_entries
from rocketq.speedups import COMPILED
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.packed_batch import PackedBatch, plan_batch

pytestmark = pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "batch_plan"), reason="the compiled module is not in use"
)

SUFFIX = b"CLUSTER\x01DefaultCluster\x02"
BORN = b"\x7f\x00\x00\x01\x00\x00\x9c\x40"
USUAL = b"WAIT\x01true\x02UNIQ_KEY\x01ID1\x02"


def plan(props: bytes, shared: tuple[bytes, ...] = (), data: bytes | None = None) -> PackedBatch | None:
    body = data if data is not None else encode_batch_entries([(b"a", USUAL, 0), (b"b", props, 1)])
    return plan_batch(
        body, SUFFIX, shared, topic="T", queue_id=1, sys_flag=0, born_timestamp=5, born_host=BORN
    )


def test_the_usual_batch_is_planned_and_reads_as_its_messages() -> None:
    tagged = b"TAGS\x01t\x02UNIQ_KEY\x01ID2\x02"
    p = plan(tagged)
    assert p is not None
    assert len(p) == 2 and not p._built  # len does not build the messages
    first, second = p
    assert (first.body, first.properties, first.flag) == (b"a", USUAL + SUFFIX, 0)
    assert (second.body, second.properties, second.flag) == (
        b"b",
        b"TAGS\x01t\x02UNIQ_KEY\x01ID2\x02" + SUFFIX,
        1,
    )
    assert (second.topic, second.queue_id, second.born_timestamp, second.born_host) == ("T", 1, 5, BORN)
    assert p[1] is second and list(reversed(p)) == [second, first] and second in p


@pytest.mark.parametrize(
    "props",
    [
        b"TAGS\x01t\x02",  # no UNIQ_KEY (the general path gives it one)
        b"UNIQ_KEY\x01\x02",  # an empty one
        b"UNIQ_KEY\x01A\x02UNIQ_KEY\x01B\x02",  # a name twice
        b"UNIQ_KEY\x01A\x02CLUSTER\x01c\x02",  # CLUSTER of its own
        b"UNIQ_KEY\x01A\x02POP_CK\x01c\x02",  # dropped by the general path
        b"UNIQ_KEY\x01A\x02DELAY\x013\x02",  # refused by the general path
        b"UNIQ_KEY\x01A\x02TIMER_DELAY_SEC\x015\x02",  # parked by the store
        b"UNIQ_KEY\x01A\x02__STARTDELIVERTIME\x0199\x02",
        b"UNIQ_KEY\x01A\x02K\x01\xc3\xa9\x02",  # non-ASCII
        b"UNIQ_KEY\x01A\x02\x01v\x02",  # an empty name
        b"UNIQ_KEY\x01A\x02x\x01a\x01b\x02",  # two separators in a piece
        b"UNIQ_KEY\x01A",  # not ended by \x02
        b"",
    ],
)
def test_messages_the_general_path_must_rebuild_are_turned_down(props: bytes) -> None:
    assert plan(props) is None


def test_a_batch_wide_property_a_message_lacks_is_turned_down() -> None:
    assert plan(b"UNIQ_KEY\x01B\x02", (b"WAIT",)) is None
    assert plan(b"WAIT\x01x\x02UNIQ_KEY\x01B\x02", (b"WAIT",)) is not None


@pytest.mark.parametrize(
    "data",
    [
        b"",  # empty
        encode_batch_entries([(b"a", USUAL, 0)])[:-1],  # cut
        encode_batch_entries([(b"a", USUAL, 0)]) + b"\x00" * 5,  # a tail too short for an entry
        b"\x00\x00\x00\x63" + encode_batch_entries([(b"a", USUAL, 0)])[4:],  # TOTALSIZE wrong
    ],
)
def test_a_malformed_body_is_turned_down(data: bytes) -> None:
    assert plan(b"UNIQ_KEY\x01B\x02", data=data) is None


def test_the_table_crc_is_zlibs() -> None:
    crc32 = COMPILED.crc32  # type: ignore[union-attr]
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000, 4099):
        data = os.urandom(n)
        assert crc32(data) == zlib.crc32(data)


@pytest.mark.parametrize("host", ["127.0.0.1:10911", "[::1]:10911"])
def test_a_results_ids_are_create_offset_msg_ids(host: str) -> None:
    """``PutMessageResult.msg_ids`` writes the host's hex once: the same text as one
    ``create_offset_msg_id`` per offset, for offsets up to the largest int64."""
    store_host = pack_socket_addr(host)
    offsets = [0, 1, 255, 4096, 2**32 + 7, 2**62, 2**63 - 1]
    result = PutMessageResult((PutMessageStatus.PUT_OK, 0, 0, 0, 0, store_host, len(offsets), offsets))
    assert result.msg_ids == [create_offset_msg_id(store_host, off) for off in offsets]
    single = PutMessageResult((PutMessageStatus.PUT_OK, 4096, 100, 0, 0, store_host, 1, None))
    assert single.msg_id == create_offset_msg_id(store_host, 4096)

"""A batch sent by the Python producer to a real broker takes the packed path (the CommitLog
records written from the batch body, no message objects) under both flush modes, and reads back
as every message sent: its body, its keys and tags, the client's ids, the broker's CLUSTER."""

from __future__ import annotations

import pytest

from rocketq.client import Producer
from rocketq.message import Message
from rocketq.speedups import COMPILED
from rocketq.store.commitlog import PutMessageResult
from rocketq.store.packed_batch import PackedBatch
from rocketq.store.store_queries import GetMessageStatus
from rocketq.testing import InProcessCluster

TOPIC = "PackedBatchT"

pytestmark = pytest.mark.skipif(
    COMPILED is None or not hasattr(COMPILED, "batch_plan"), reason="the compiled module is not in use"
)


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_client_batch_is_packed_and_reads_back_whole(tmp_path: object, flush: str) -> None:
    with InProcessCluster(data_dir=str(tmp_path), store_options={"flush_disk_type": flush}) as cluster:
        cluster.create_topic(TOPIC, 1)
        store = cluster.store()
        commitlog = store.commitlog
        taken: list[bool] = []
        original = commitlog._put_packed

        def spy(batch: PackedBatch) -> PutMessageResult | None:
            result = original(batch)
            taken.append(result is not None)
            return result

        commitlog._put_packed = spy  # type: ignore[method-assign]
        sent = []
        with Producer("PackedPG", namesrv_addr=cluster.namesrv_addr) as producer:
            producer.send(Message(TOPIC, b"first"))  # the topic's record layout
            for b in range(5):
                msgs = [
                    Message(TOPIC, b"b%d-%d" % (b, i) * (i + 1), tags=f"t{i % 3}", keys=[f"k{b}-{i}"])
                    for i in range(32)
                ]
                result = producer.send_batch(msgs)
                sent.append((msgs, result))
        assert taken == [True] * 5
        cluster.wait_dispatched()
        got = store.get_message("G", TOPIC, 0, 1, 1000)
        assert got.status is GetMessageStatus.FOUND
        stored = got.messages
        expected = [m for msgs, _ in sent for m in msgs]
        assert [m.body for m in stored] == [m.body for m in expected]
        assert [m.tags for m in stored] == [m.tags for m in expected]
        assert [m.keys for m in stored] == [list(m.keys) for m in expected]
        ids = [i for _, result in sent for i in result.msg_id.split(",")]
        assert [m.uniq_key for m in stored] == ids
        assert {m.properties["CLUSTER"] for m in stored} == {"DefaultCluster"}
        assert [m.queue_offset for m in stored] == list(range(1, 161))
        found = store.query_messages_by_key(TOPIC, "k3-17")
        assert [m.body for m in found.messages] == [b"b3-17" * 18]

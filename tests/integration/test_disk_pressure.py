"""Disk pressure and disk full with a real ``rocketq serve`` over a small tmpfs.

Each test mounts its own tmpfs as the server's data directory (skipped, with the reason, where
mounting is not permitted), fills it with a filler file, and deletes the filler to give space
back. What is checked:

* (a) Retention at high disk use deletes nothing a consumer has not consumed: writes are
  refused (SERVICE_NOT_AVAILABLE, "disk full ... not yet consumed") and accepted again, without
  a restart, once the messages are consumed and retention could delete them. With
  ``forceCleanUnconsumed=true`` it deletes them and logs one WARNING with the counts.
* (b) Disk full while the current CommitLog segment still has room: a send is acknowledged only
  if its message is visible (a message that needs a new ConsumeQueue file is refused); a send
  that would create its topic fails; UPDATE_AND_CREATE_TOPIC and consumer-offset commits answer
  with the error; SIGTERM exits 0 and logs at ERROR what could not be written; after the
  filler goes, writes work again without a restart.
* (c) A CommitLog segment size the disk cannot hold stops start-up with one line.

After every fault and a restart, every acknowledged message that must exist is read back at
its queue offset, once, with its body.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from procs import ServeProcess

from _support.requests import create_topic_request, pull_request, send_request
from _support.tmpfs import fill, free_bytes, small_tmpfs, total_bytes
from rocketq.errors import ResponseCode
from rocketq.protocol import fastjson
from rocketq.protocol import record as rec
from rocketq.remoting import RemotingClient, RemotingCommand, RequestCode, create_request

T = TypeVar("T")

CALL_TIMEOUT_S = 10.0
WAIT_S = 20.0
GROUP = "DiskGroup"
#: 1 MiB CommitLog segments, ConsumeQueue files of 100 units, index files of 64 keys (a new one
#: on the full disk too), retention every 200 ms.
STORE = {
    "mappedFileSizeCommitLog": str(1 << 20),
    "mappedFileSizeConsumeQueue": str(100 * 20),
    "maxHashSlotNum": "16",
    "maxIndexNum": "64",
    "cleanResourceInterval": "200",
    "flushConsumerOffsetInterval": "200",
}


def run(coro: Coroutine[Any, Any, T], limit_s: float = 240.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, limit_s)

    return asyncio.run(bounded())


async def until(
    condition: Callable[[], Coroutine[Any, Any, bool]], what: str, timeout_s: float = WAIT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.05)


def serve_on_tmpfs(tmp_path: pathlib.Path, conf: dict[str, str]) -> ServeProcess:
    return ServeProcess(tmp_path, flush="SYNC_FLUSH", broker_conf={**STORE, **conf})


class Broker:
    """Requests as a Java client sends them, and the acknowledged messages per queue."""

    def __init__(self, client: RemotingClient, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.acked: dict[tuple[str, int, int], bytes] = {}

    async def call(self, request: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(self.addr, request, CALL_TIMEOUT_S)

    async def send(self, topic: str, queue_id: int, body: bytes) -> RemotingCommand:
        r = await self.call(
            send_request(topic, body, queue_id=queue_id, group="DiskProducer", properties={"WAIT": "true"})
        )
        if r.code == ResponseCode.SUCCESS:
            key = (topic, queue_id, int(r.ext_fields["queueOffset"]))
            assert key not in self.acked, f"queue offset acknowledged twice: {key}"
            self.acked[key] = body
        else:
            assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
        return r

    async def create_topic(self, topic: str, queues: int) -> RemotingCommand:
        return await self.call(create_topic_request(topic, queues=queues))

    async def commit(self, topic: str, queue_id: int, offset: int) -> RemotingCommand:
        return await self.call(
            create_request(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": topic, "queueId": queue_id, "commitOffset": offset},
            )
        )

    async def query_offset(self, topic: str, queue_id: int) -> int:
        r = await self.call(
            create_request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": GROUP, "topic": topic, "queueId": queue_id},
            )
        )
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        return int(r.ext_fields["offset"])

    async def min_max(self, topic: str, queue_id: int) -> tuple[int, int]:
        out = []
        for code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET):
            r = await self.call(create_request(code, {"topic": topic, "queueId": queue_id}))
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
            out.append(int(r.ext_fields["offset"]))
        return out[0], out[1]

    async def read_queue(self, topic: str, queue_id: int, start: int) -> dict[int, bytes]:
        """Every message of the queue from ``start`` on; asserts offsets run without a gap."""
        out: dict[int, bytes] = {}
        offset = start
        while True:
            r = await self.call(
                pull_request(
                    topic, offset, queue_id=queue_id, group="DiskVerifier", suspend_ms=0, max_msgs=32
                )
            )
            if r.code == ResponseCode.PULL_NOT_FOUND:
                return out
            assert r.code == ResponseCode.SUCCESS, (topic, queue_id, offset, r.code, r.remark)
            pos = 0
            while pos < len(r.body):
                view = rec.decode_record(r.body, pos, check_crc=True)
                assert view.kind is rec.RecordKind.MESSAGE, view.reason
                assert view.queue_offset == offset, (topic, queue_id, view.queue_offset, offset)
                out[offset] = bytes(view.body)
                offset += 1
                pos += view.size

    async def verify(
        self,
        topics: dict[str, int],
        *,
        consumed: dict[tuple[str, int], int] | None = None,
        forced: bool = False,
    ) -> None:
        """Every acknowledged message of ``topics`` (name → queues) at its queue offset, once; a
        queue's messages below its consumed offset may be gone (retention), nothing else (with
        ``forced``, anything below the queue's minimum offset may be gone)."""
        for topic, queues in topics.items():
            for q in range(queues):
                low, high = await self.min_max(topic, q)
                allowed = (consumed or {}).get((topic, q), 0)
                assert forced or low <= allowed, f"{topic}/{q}: deleted below {low}, consumed only {allowed}"
                got = await self.read_queue(topic, q, low)
                want = {o: b for (t, qq, o), b in self.acked.items() if t == topic and qq == q and o >= low}
                assert got == want, f"{topic}/{q}: {sorted(set(got) ^ set(want))[:10]} differ"
                assert high == (max(want) + 1 if want else low)


def commitlog_files(serve: ServeProcess) -> list[str]:
    return sorted(p.name for p in (serve.store_dir / "commitlog").iterdir())


def body(n: int, size: int) -> bytes:
    head = f"message {n:06d} ".encode()
    return head + bytes(n % 251 for _ in range(size - len(head)))


# -- (a) disk pressure ----------------------------------------------------------------------------


def _pressure(tmp_path: pathlib.Path, force: bool) -> None:
    with small_tmpfs(tmp_path / "data", "24m") as mnt:
        serve = serve_on_tmpfs(tmp_path, {"forceCleanUnconsumed": str(force).lower()})
        try:

            async def main() -> None:
                async with RemotingClient() as client:
                    b = Broker(client, serve.start())
                    assert (await b.create_topic("Pressure", 2)).code == ResponseCode.SUCCESS
                    n = 0
                    while len(commitlog_files(serve)) < 8:  # ~7 MiB of messages, two queues
                        r = await b.send("Pressure", n % 2, body(n, 8000))
                        assert r.code == ResponseCode.SUCCESS, r.remark
                        n += 1
                    segments = commitlog_files(serve)
                    total = total_bytes(mnt)
                    fill(mnt, leave=int(total * 0.06))
                    usage_before = 1 - free_bytes(mnt) / total
                    assert 0.91 < usage_before < 0.97, usage_before

                    refused = ""

                    async def refused_or_forced() -> bool:
                        nonlocal refused
                        r = await b.send("Pressure", 0, body(n, 8000))
                        if r.code == ResponseCode.SERVICE_NOT_AVAILABLE:
                            refused = r.remark or ""
                            return True
                        return force and commitlog_files(serve) != segments

                    await until(refused_or_forced, "retention to refuse writes or delete")
                    if not force:
                        assert re.search(r"disk full: 9\d% used, limit 90%.*not yet consumed", refused), (
                            refused
                        )
                        assert commitlog_files(serve) == segments  # nothing deleted
                        assert "deleting segment" not in serve.log_text(None)
                        await b.verify({"Pressure": 2})
                        # a consumer reads everything and commits: retention may now delete
                        consumed = {}
                        for q in range(2):
                            _, high = await b.min_max("Pressure", q)
                            assert (await b.commit("Pressure", q, high)).code == ResponseCode.SUCCESS
                            consumed[("Pressure", q)] = high

                        async def accepted() -> bool:
                            return (await b.send("Pressure", 1, body(n, 8000))).code == ResponseCode.SUCCESS

                        await until(accepted, "writes accepted again after consumption")
                        assert len(commitlog_files(serve)) < len(segments)
                        await b.verify({"Pressure": 2}, consumed=consumed)
                        log = serve.log_text(None)
                        assert "accepting writes" in log and "consumed)" in log
                    else:

                        async def forced_logged() -> bool:
                            return "forced cleaning" in serve.log_text(None)

                        await until(forced_logged, "the forced-cleaning WARNING")
                        line = next(x for x in serve.log_text(None).splitlines() if "forced cleaning" in x)
                        assert " WARNING " in line, line
                        m = re.search(
                            r"deleted (\d+) CommitLog segments \((\d+) B.*holding (\d+) messages", line
                        )
                        assert m is not None, line
                        assert int(m[1]) >= 1 and int(m[2]) == int(m[1]) << 20 and int(m[3]) > 0, line
                    assert serve.terminate() == 0
                    (mnt / "filler").unlink()
                    b.addr = serve.start()
                    if force:
                        await b.verify({"Pressure": 2}, forced=True)
                    else:
                        await b.verify({"Pressure": 2}, consumed=consumed)

            run(main())
        finally:
            serve.close()


@pytest.mark.slow  # a rocketq serve process filled to its watermarks and restarted
def test_pressure_refuses_writes_instead_of_deleting_unconsumed(tmp_path: pathlib.Path) -> None:
    _pressure(tmp_path, force=False)


@pytest.mark.slow  # a rocketq serve process filled to its watermarks and restarted
def test_forced_cleaning_deletes_unconsumed_and_warns_with_counts(tmp_path: pathlib.Path) -> None:
    _pressure(tmp_path, force=True)


# -- (b) disk full ----------------------------------------------------------------------------------


@pytest.mark.slow  # a rocketq serve process run into a full disk, stopped and restarted
def test_disk_full_acknowledges_nothing_it_cannot_keep_and_recovers(tmp_path: pathlib.Path) -> None:
    # watermarks at 100 %: the full disk itself (ENOSPC) is what refuses, not retention
    conf = {
        "diskMaxUsedSpaceRatio": "100",
        "diskSpaceCleanForciblyRatio": "100",
        "diskSpaceWarningLevelRatio": "100",
    }
    with small_tmpfs(tmp_path / "data", "8m") as mnt:
        serve = serve_on_tmpfs(tmp_path, conf)
        try:

            async def main() -> None:
                async with RemotingClient() as client:
                    b = Broker(client, serve.start())
                    assert (await b.create_topic("Old", 1)).code == ResponseCode.SUCCESS
                    for i in range(50):
                        assert (await b.send("Old", 0, body(i, 500))).code == ResponseCode.SUCCESS
                    assert (await b.commit("Old", 0, 10)).code == ResponseCode.SUCCESS

                    async def offsets_written() -> bool:
                        obj = fastjson.load_file(str(serve.store_dir / "config" / "consumerOffset.json"))
                        return isinstance(obj, dict) and f"Old@{GROUP}" in (obj.get("offsetTable") or {})

                    await until(offsets_written, "consumerOffset.json")

                    fill(mnt)
                    # the CommitLog segment and the ConsumeQueue file (units 0..99) have room
                    for i in range(50, 100):
                        r = await b.send("Old", 0, body(i, 500))
                        assert r.code == ResponseCode.SUCCESS, r.remark
                    # unit 100 needs a new ConsumeQueue file: refused, not acknowledged invisibly
                    r = await b.send("Old", 0, body(100, 500))
                    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in (r.remark or "")
                    # a send that would create its topic fails; the topic is not half-created
                    r = await b.send("Auto", 0, b"auto")
                    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "topics.json" in (
                        r.remark or ""
                    ), r
                    r = await b.send("Auto", 0, b"auto")
                    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, r
                    r = await b.create_topic("AdminTopic", 2)
                    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk full" in (r.remark or ""), r
                    commit_error = ""
                    offset = 20

                    async def commit_refused() -> bool:
                        nonlocal commit_error, offset
                        offset += 1
                        r = await b.commit("Old", 0, offset)
                        commit_error = r.remark or ""
                        return r.code == ResponseCode.SERVICE_NOT_AVAILABLE

                    await until(commit_refused, "an offset commit to report the failed write")
                    assert "disk full" in commit_error and "consumerOffset.json" in commit_error
                    await b.verify({"Old": 1})

                    # space is back: everything works again without a restart
                    (mnt / "filler").unlink()
                    assert (await b.send("Old", 0, body(100, 500))).code == ResponseCode.SUCCESS
                    assert (await b.send("Auto", 0, b"auto")).code == ResponseCode.SUCCESS
                    assert (await b.create_topic("AdminTopic", 2)).code == ResponseCode.SUCCESS
                    assert (await b.commit("Old", 0, 40)).code == ResponseCode.SUCCESS
                    await until(offsets_written, "consumerOffset.json")

                    async def offset_40_written() -> bool:
                        obj = fastjson.load_file(str(serve.store_dir / "config" / "consumerOffset.json"))
                        assert isinstance(obj, dict)
                        return obj["offsetTable"][f"Old@{GROUP}"] == {"0": 40}

                    await until(offset_40_written, "offset 40 in consumerOffset.json")
                    await b.verify({"Old": 1, "Auto": 4})

                    # full again, then SIGTERM: a clean exit, the unwritable state logged at ERROR
                    fill(mnt)
                    await b.commit("Old", 0, 45)  # answered either way; not on disk
                    assert serve.terminate() == 0
                    log = serve.log_text(None)
                    assert re.search(
                        r" ERROR .*shutting down without persisting .*consumerOffset\.json", log
                    ), log[-3000:]
                    assert "Traceback" not in log, log[-3000:]
                    (mnt / "filler").unlink()
                    b.addr = serve.start()
                    await b.verify({"Old": 1, "Auto": 4})
                    assert await b.query_offset("Old", 0) == 40
                    topics = fastjson.load_file(str(serve.store_dir / "config" / "topics.json"))
                    assert isinstance(topics, dict) and "AdminTopic" in topics["topicConfigTable"]

            run(main())
        finally:
            serve.close()


# -- (c) start-up -----------------------------------------------------------------------------------


def test_start_refuses_a_segment_size_the_disk_cannot_hold(tmp_path: pathlib.Path) -> None:
    with small_tmpfs(tmp_path / "data", "8m"):
        serve = ServeProcess(tmp_path, broker_conf={"mappedFileSizeCommitLog": str(16 << 20)})
        try:
            with pytest.raises(AssertionError, match="exited with 1"):
                serve.start(timeout_s=WAIT_S)
            log = serve.log_text(None)
            assert "rocketq ready" not in log
            line = next(x for x in log.splitlines() if x.startswith("rocketq serve: error:"))
            assert re.search(
                r"CommitLog segments of 16777216 B \(mapped_file_size_commit_log, broker.conf "
                r"mappedFileSizeCommitLog\) need 33554432 B free .* has \d+ B free",
                line,
            ), line
            assert "Traceback" not in log
        finally:
            serve.close()

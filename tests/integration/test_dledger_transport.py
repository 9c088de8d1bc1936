"""The Raft peer transport (rocketq.ha.peer_transport) on real sockets: a peer that is down, then up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from _support.procs import free_port
from _support.wait import wait_until_async
from rocketq.ha import entry_format as fmt
from rocketq.ha.peer_transport import PeerTransport, _Merging
from rocketq.ha.raft_types import Append, AppendReply, Entry, Heartbeat, Message


def test_a_peer_that_is_down_costs_no_wait_and_is_reached_once_it_is_up() -> None:
    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        got: list[Message] = []
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: None)
        b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: got.append(m))
        await a.start()
        try:
            t0 = time.perf_counter()
            for k in range(1000):  # b is not listening: every send is dropped at once
                assert not a.send(Heartbeat("a", "b", 1, k))
            assert time.perf_counter() - t0 < 1.0
            assert a.control["b"].dropped == 1000 and not got
            await b.start()  # now reachable: the link reconnects on its backoff

            def through() -> bool:
                a.send(Heartbeat("a", "b", 1, 7))
                a.send(Append("a", "b", 1, -1, 0, (Entry(0, 1, b"x" * 100),), -1))
                return any(isinstance(m, Heartbeat) for m in got) and any(isinstance(m, Append) for m in got)

            await wait_until_async(through, "messages through after the peer came up", 10, 0.02)
            assert a.control["b"].connected and a.bulk["b"].connected
            assert next(m for m in got if isinstance(m, Append)).entries[0].data == b"x" * 100
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_links_connect_and_reconnect_on_their_own_with_nothing_sent() -> None:
    """A follower sends nothing to the other followers, yet its links to them must be up when it
    becomes leader (its first appends would be dropped otherwise): a link keeps itself connected,
    through a peer that was not up at start and one that went away and came back."""

    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: None)
        await a.start()  # b is not listening yet: the first attempts fail
        b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: None)
        try:

            def up() -> bool:
                return a.control["b"].connected and a.bulk["b"].connected

            await asyncio.sleep(0)
            assert not up()
            await b.start()
            await wait_until_async(up, "a's links to b up, nothing sent on them", 10, 0.01)
            await b.close()  # b goes away and comes back on the same address
            await wait_until_async(lambda: not up(), "a's links to b down", 10, 0.01)
            b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: None)
            await b.start()
            await wait_until_async(up, "a's links to b up again, nothing sent on them", 10, 0.01)
            assert a.control["b"].sent == 0 and a.bulk["b"].sent == 0
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_appends_merge_and_replies_superseded_in_one_iteration_arrive_as_one() -> None:
    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        got: list[Message] = []
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: None, merge_bytes=1 << 16)
        b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: got.append(m))
        await b.start()
        await a.start()
        try:
            await wait_until_async(lambda: a.bulk["b"].connected, "a's bulk link up", 10, 0.02)
            for i in range(50):  # 50 appends that continue each other, commit rising: one message
                a.send(Append("a", "b", 1, i - 1, 1 if i else 0, (Entry(i, 1, b"e%d" % i),), i - 2))
            a.send(AppendReply("a", "b", 1, True, 49, 10, 5))
            a.send(AppendReply("a", "b", 1, True, 49, 49, 5))  # says more: replaces the one before
            a.send(AppendReply("a", "b", 1, True, 49, 49, 3))  # says less of the fsync: kept
            a.send(Append("a", "b", 2, 49, 1, (Entry(50, 2, b"t2"),), 48))  # another term: not merged
            await wait_until_async(lambda: len(got) >= 4, "the queued messages", 10, 0.02)
            appends = [m for m in got if isinstance(m, Append)]
            assert [([e.index for e in m.entries], m.commit) for m in appends] == [
                (list(range(50)), 47), ([50], 48),
            ]  # fmt: skip
            replies = [(m.appended_index, m.synced_index) for m in got if isinstance(m, AppendReply)]
            assert replies == [(49, 5), (49, 3)]
            assert a.merged == 50
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_same_entries_for_two_followers_are_read_once_and_each_follower_s_frames_written_once() -> None:
    async def main() -> None:
        addrs = {n: f"127.0.0.1:{free_port()}" for n in ("a", "b", "c")}
        raws = {i: fmt.encode_entry(fmt.MAGIC_NORMAL, i, 1, 100 * i, b"r%d" % i, 0) for i in range(6)}
        reads: list[tuple[int, int]] = []

        def reader(index: int, size: int) -> bytes:
            reads.append((index, size))
            out, i = b"", index
            while len(out) < size:
                out += raws[i]
                i += 1
            return out

        got: dict[str, list[list[bytes] | None]] = {"b": [], "c": []}
        peers = {n: addrs[n] for n in ("b", "c")}
        a = PeerTransport("a", addrs["a"], peers, lambda m, raw: None, merge_bytes=1 << 16, raw_reader=reader)
        followers = [
            PeerTransport(n, addrs[n], {"a": addrs["a"]}, lambda m, raw, n=n: got[n].append(raw))
            for n in peers
        ]
        for t in (*followers, a):
            await t.start()
        try:
            await wait_until_async(
                lambda: all(link.connected for link in a.bulk.values()), "links up", 10, 0.02
            )
            writes: dict[str, list[int]] = {n: [] for n in peers}
            for n in peers:  # the frames each follower gets are written at once, together
                conn = a.bulk[n]._conn
                assert conn is not None and conn._transport is not None
                write = conn._transport.write

                def counting(data: Any, n: str = n, write: Callable[[Any], None] = write) -> None:
                    writes[n].append(len(data))
                    write(data)

                conn._transport.write = counting  # type: ignore[method-assign]
            entries = tuple(Entry(i, 1, b"r%d" % i) for i in range(6))
            for n in peers:
                a.send(Append("a", n, 1, -1, 0, entries[:3], -1))
                a.send(Append("a", n, 1, 2, 1, entries[3:], -1))  # merged with the one before
                a.send(AppendReply("a", n, 1, True, 5, 5, 5))  # a message of its own
            a.flush()
            assert reads == [(0, sum(len(r) for r in raws.values()))]  # one read for both
            assert [len(w) for w in writes.values()] == [1, 1]  # two frames, one write
            await wait_until_async(lambda: all(len(g) == 2 for g in got.values()), "both messages", 10, 0.02)
            assert got == {n: [[raws[i] for i in range(6)], None] for n in peers}
        finally:
            for t in (a, *followers):
                await t.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_message_queued_after_a_flush_in_the_same_iteration_leaves_at_its_end() -> None:
    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        got: list[Message] = []
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: None, merge_bytes=1 << 16)
        b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: got.append(m))
        await b.start()
        await a.start()
        try:
            await wait_until_async(lambda: a.bulk["b"].connected, "a's bulk link up", 10, 0.02)
            for round_ in range(3):  # each in one synchronous stretch: queued, flushed, queued
                a.send(Append("a", "b", 1, -1, 0, (Entry(0, 1, b"first"),), round_))
                a.flush()
                a.send(AppendReply("a", "b", 1, True, round_, round_, round_))
                await wait_until_async(lambda n=2 * round_ + 2: len(got) >= n, "both messages", 10, 0.02)
            # a last one behind them on the bulk connection: whatever was sent twice is in before it
            a.send(AppendReply("a", "b", 1, True, 99, 99, 99))
            await wait_until_async(lambda: len(got) >= 7, "the last message", 10, 0.02)
            assert [
                (type(m).__name__, getattr(m, "commit", getattr(m, "match_index", None))) for m in got
            ] == [
                *((name, r) for r in range(3) for name in ("Append", "AppendReply")),
                ("AppendReply", 99),
            ]
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_appends_merge_up_to_the_merge_bytes_counted_in_entry_sizes() -> None:
    def append(prev: int, *bodies: bytes) -> Append:
        entries = tuple(Entry(prev + 1 + k, 1, d) for k, d in enumerate(bodies))
        return Append("a", "b", 1, prev, 1, entries, prev)

    # entry sizes 148, 248 and 98 (48 B of header each): 394 fit a limit of 400, 492 do not
    merging = _Merging(append(4, b"x" * 100))
    assert merging.add(append(5, b"y" * 200), 400)
    assert not merging.add(append(6, b"z" * 50), 400) and merging.add(append(6, b"z" * 50), 494)
    assert not merging.add(append(7, b""), 494)  # 542 B
    m = merging.message()
    assert [e.index for e in m.entries] == [5, 6, 7] and m.commit == 6 and m.prev_index == 4
    assert _Merging(append(4, b"x" * 100)).add(append(6, b"y"), 1 << 20) is False  # not contiguous


def test_a_follower_s_reply_to_an_append_is_written_as_the_append_is_handled() -> None:
    """The reply an append's delivery queues leaves at the end of the read that brought the
    append: no end-of-iteration callback of the transport, none of the link's connection, one
    write per read (the replies to a read's appends supersede each other); in order."""

    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        got: list[Message] = []
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: got.append(m), merge_bytes=1 << 16)

        def answer(m: Message, raw: object) -> None:
            assert isinstance(m, Append)
            last = m.entries[-1].index
            b.send(AppendReply("b", "a", 1, True, last, last - 1, -1))
            b.send(AppendReply("b", "a", 1, True, last, last, -1))  # its write: supersedes the one before

        b = PeerTransport("b", b_addr, {"a": a_addr}, answer, merge_bytes=1 << 16)
        callbacks: list[str] = []
        b._flush_bulk = lambda: callbacks.append("transport")  # type: ignore[method-assign]
        await a.start()
        await b.start()
        try:

            def up() -> bool:
                for link in (a.bulk["b"], b.bulk["a"]):
                    if not link.connected:
                        link._ensure_connecting()  # what a send on a link that is down does
                return a.bulk["b"].connected and b.bulk["a"].connected

            await wait_until_async(up, "bulk links up", 10, 0.02)
            conn = b.bulk["a"]._conn
            assert conn is not None and conn._transport is not None
            write = conn._transport.write
            writes: list[bool] = []

            def counting(data: Any) -> None:
                writes.append(conn._flush_scheduled)  # type: ignore[union-attr]
                write(data)

            conn._transport.write = counting  # type: ignore[method-assign]
            for i in range(5):
                a.send(Append("a", "b", 1, i - 1, 1 if i else 0, (Entry(i, 1, b"e%d" % i),), i - 1))
                a.flush()
                await wait_until_async(lambda n=i + 1: len(got) >= n, f"reply {i}", 10, 0.01)
            assert [(m.match_index, m.appended_index) for m in got if isinstance(m, AppendReply)] == [
                (i, i) for i in range(5)
            ]
            assert writes == [False] * 5 and not conn._flush_scheduled and callbacks == []
            # two appends that do not merge (a gap between them), written together: one read,
            # whose replies supersede each other and leave at its end as one
            reads_before = b.received
            a.send(Append("a", "b", 1, 4, 1, (Entry(5, 1, b"e5"),), 4))
            a.send(Append("a", "b", 1, 9, 1, (Entry(10, 1, b"e10"),), 4))
            a.flush()
            await wait_until_async(lambda: b.received == reads_before + 2, "both appends", 10, 0.01)
            await wait_until_async(lambda: len(got) >= 6, "the reply", 10, 0.01)
            assert [(m.match_index, m.appended_index) for m in got[5:]] == [(10, 10)]  # type: ignore[attr-defined]
            assert writes == [False] * 6 and callbacks == []
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_held_proposal_s_messages_schedule_no_flush_and_leave_with_the_callers_flush() -> None:
    """After ``hold()`` (a leader's proposal), what is queued for the bulk links schedules no
    end-of-iteration callback: the caller's ``flush()`` writes it and ends the hold, after
    which a message queued schedules the callback as before."""

    async def main() -> None:
        a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        got: list[Message] = []
        a = PeerTransport("a", a_addr, {"b": b_addr}, lambda m, raw: None, merge_bytes=1 << 16)
        b = PeerTransport("b", b_addr, {"a": a_addr}, lambda m, raw: got.append(m))
        callbacks: list[str] = []
        flush_bulk = a._flush_bulk

        def counted() -> None:
            callbacks.append("transport")
            flush_bulk()

        a._flush_bulk = counted  # type: ignore[method-assign]
        await b.start()
        await a.start()
        try:
            await wait_until_async(lambda: a.bulk["b"].connected, "a's bulk link up", 10, 0.02)
            a.hold()
            a.send(Append("a", "b", 1, -1, 0, (Entry(0, 1, b"e0"),), -1))
            a.send(Append("a", "b", 1, 0, 1, (Entry(1, 1, b"e1"),), 0))  # merged with the first
            assert not a._flush_scheduled
            a.flush()
            await wait_until_async(lambda: len(got) >= 1, "the proposal's append", 10, 0.01)
            assert callbacks == []
            ((append),) = got
            assert isinstance(append, Append) and [e.index for e in append.entries] == [0, 1]
            # the hold ended with the flush: a later message is flushed at the iteration's end
            a.send(Append("a", "b", 1, 1, 1, (Entry(2, 1, b"e2"),), 1))
            assert a._flush_scheduled
            await wait_until_async(lambda: len(got) >= 2, "the later append", 10, 0.01)
            assert callbacks == ["transport"]
        finally:
            await a.close()
            await b.close()

    asyncio.run(asyncio.wait_for(main(), 30))

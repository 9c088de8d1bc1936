"""The driver's commit of a write's staged half messages, safe against a broker failing midway.

A write is committed with one END_TRANSACTION COMMIT per half message, sent to the broker that
stores it. RocketMQ has no atomic commit across brokers or across requests, so a broker that dies
in the middle leaves some halves committed and some prepared, and the answers to the requests it
had in flight are lost. This module makes that case as safe as the protocol allows::

    op mark      before the first END_TRANSACTION goes to a broker, the max offset of its
                 RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0 (every half the broker ends appends one op
                 message there, body = the half's queue offset as text). Given to ``on_marks``
                 (the streaming sink records it in its batch marker) before anything is sent.
    round        END COMMIT for every pending half of every reachable broker
                 SUCCESS                       → done
                 error answer / no answer      → stays pending; the broker is "in doubt"
    before a     pull the op queue of a broker in doubt from its mark: halves named there were
    retry        ended before the failure (only the answer was lost) → done, not sent again.
                 A restarted broker forgets which halves it ended, so without this a second
                 COMMIT of such a half would publish its message twice.
    retries      every RETRY_INTERVAL_MS, up to ``retry_ms`` after the first failed round (a
                 broker restarted on the same address is what this waits for), never after
                 ``deadline_ms`` (the write's commit deadline, see :mod:`rocketq.spark.writer`)
    give up      :class:`CommitIncomplete` naming, per broker, the queues and how many rows of
                 each are in doubt. Rows on the other brokers are published.

A row in doubt is published if and only if its broker executed the COMMIT before it failed (it is
then visible once the broker is back); otherwise its half stays prepared, nobody of the job's
producer group is left to answer the broker's transaction check, and after
``transactionCheckMax`` checks the broker moves it to TRANS_CHECK_MAX_TIME_TOPIC: never published.

Remaining window (RocketMQ's own): a broker killed between storing a committed message and storing
its op message has published the row without a trace in the op queue; a retry then publishes it a
second time. The two puts happen back to back on the broker's event loop, so the window is the
time of one in-memory append.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from ssl import SSLContext

from rocketq.errors import ResponseCode, RocketqError, TopicNotExist
from rocketq.protocol.topic import TRANS_OP_HALF_TOPIC
from rocketq.remoting import RemotingClient, RequestCode, create_request
from rocketq.remoting.client import RpcHook
from rocketq.spark.pull import pull_once
from rocketq.spark.staged import COMMIT, StagedMessage, StagedWriteError, now_ms

log = logging.getLogger(__name__)

#: END_TRANSACTION requests in flight per broker.
END_CONCURRENCY = 64
#: Pause between commit rounds while a broker is failing.
RETRY_INTERVAL_MS = 500
#: Op messages pulled per request while looking for halves already ended.
OP_PULL_BATCH = 256


class CommitIncomplete(StagedWriteError):
    """Some brokers did not confirm the commit of their rows within the retry bound."""

    def __init__(self, message: str, in_doubt: Mapping[str, Sequence[StagedMessage]]) -> None:
        super().__init__(message)
        #: Broker address → the halves whose fate only that broker knows.
        self.in_doubt = {addr: list(halves) for addr, halves in in_doubt.items()}


@dataclass
class CommitReport:
    """What a commit did: rows confirmed, rounds it took, rows found ended in an op queue."""

    committed: int = 0
    rounds: int = 0
    found_ended: int = 0


@dataclass
class _Broker:
    addr: str
    pending: dict[int, StagedMessage]  # by half queue offset (unique on one broker)
    mark: int | None = None
    in_doubt: bool = False  # END_TRANSACTION sent without a clear answer
    last_error: str = ""
    names: set[str] = field(default_factory=set)


async def op_queue_max(client: RemotingClient, addr: str, timeout_s: float) -> int:
    """Max offset of ``addr``'s op queue (0 when the broker has none yet)."""
    fields = {"topic": TRANS_OP_HALF_TOPIC, "queueId": 0}
    response = await client.invoke(addr, create_request(RequestCode.GET_MAX_OFFSET, fields), timeout_s)
    if response.code != ResponseCode.SUCCESS:
        return 0
    return int(response.ext_fields.get("offset", 0))


async def ended_halves(client: RemotingClient, addr: str, start: int, timeout_s: float) -> set[int]:
    """Queue offsets of the halves ``addr`` ended (op messages from ``start`` on)."""
    ended: set[int] = set()
    offset = start
    while True:
        try:
            pulled = await pull_once(client, addr, TRANS_OP_HALF_TOPIC, 0, offset, OP_PULL_BATCH, timeout_s)
        except TopicNotExist:
            return ended  # the broker never ended a half
        for m in pulled.messages:
            text = m.body.decode("ascii", "replace")
            # one op names one half here; RocketMQ 5 may pack several as "1,2,3"
            ended.update(int(part) for part in text.split(",") if part.strip().isdigit())
        if pulled.next_offset <= offset:
            return ended
        offset = pulled.next_offset


def _end_fields(group: str, m: StagedMessage, kind: int) -> dict[str, str]:
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(m.tran_state_offset),
        "commitLogOffset": str(m.commit_log_offset),
        "commitOrRollback": str(kind),
        "fromTransactionCheck": "false",
        "msgId": m.msg_id,
        "transactionId": m.msg_id,
        "topic": m.topic,
    }


async def end_each(
    client: RemotingClient, group: str, staged: Sequence[StagedMessage], kind: int, timeout_s: float
) -> dict[StagedMessage, str]:
    """END_TRANSACTION ``kind`` for every half; returns the failed ones with the reason.

    The halves of one queue are ended one after another, in the order they were staged: a
    commit stores the message in its queue, so ending them concurrently could store them out of
    order (the broker looks each half up on a worker thread), and rows of one sharding key must
    keep theirs. Queues are ended concurrently, up to ``END_CONCURRENCY`` requests per broker."""
    limits: dict[str, asyncio.Semaphore] = {}
    failures: dict[StagedMessage, str] = {}
    lanes: dict[tuple[str, str, int], list[StagedMessage]] = {}
    for m in staged:
        lanes.setdefault((m.addr, m.topic, m.queue_id), []).append(m)

    async def end(m: StagedMessage) -> None:
        limit = limits.setdefault(m.addr, asyncio.Semaphore(END_CONCURRENCY))
        async with limit:
            try:
                request = create_request(RequestCode.END_TRANSACTION, _end_fields(group, m, kind))
                response = await client.invoke(m.addr, request, timeout_s)
            except RocketqError as exc:
                failures[m] = str(exc)
                return
        if response.code != ResponseCode.SUCCESS:
            failures[m] = f"code {response.code} {response.remark or ''}".strip()

    async def end_lane(lane: list[StagedMessage]) -> None:
        for m in lane:
            await end(m)

    await asyncio.gather(*(end_lane(lane) for lane in lanes.values()))
    return failures


def _queue_name(m: StagedMessage) -> str:
    if m.queue_id < 0:
        return f"{m.topic}/{m.broker or m.addr}/?"
    return f"{m.topic}/{m.broker or m.addr}/{m.queue_id}"


def describe_in_doubt(brokers: Sequence[_Broker]) -> str:
    parts: list[str] = []
    for b in brokers:
        counts = Counter(_queue_name(m) for m in b.pending.values())
        queues = ", ".join(f"{q} ({n} rows)" for q, n in sorted(counts.items()))
        name = "/".join(sorted(b.names)) or "?"
        parts.append(f"broker {name} ({b.addr}): {queues}; last error: {b.last_error}")
    return "; ".join(parts)


async def commit_halves(
    group: str,
    staged: Sequence[StagedMessage],
    *,
    timeout_ms: int,
    retry_ms: int,
    deadline_ms: int | None = None,
    marks: Mapping[str, int] | None = None,
    on_marks: Callable[[dict[str, int]], None] | None = None,
    rpc_hook: RpcHook | None = None,
    ssl: SSLContext | None = None,
) -> CommitReport:
    """Commit every half (see the module rules); raises CommitIncomplete when some brokers did
    not confirm theirs within ``retry_ms`` of the first failure (or by ``deadline_ms``).

    ``marks`` are op marks recorded by an earlier attempt at the same commit (a replayed
    streaming batch): its brokers start "in doubt", so halves already ended are not sent again."""
    known = dict(marks or {})
    brokers: dict[str, _Broker] = {}
    for m in staged:
        b = brokers.setdefault(m.addr, _Broker(m.addr, {}, known.get(m.addr), m.addr in known))
        b.pending[m.tran_state_offset] = m
        if m.broker:
            b.names.add(m.broker)
    report = CommitReport()
    timeout_s = timeout_ms / 1000
    client = RemotingClient(rpc_hook=rpc_hook, ssl=ssl)
    loop = asyncio.get_running_loop()
    first_failure: float | None = None
    try:
        while True:
            report.rounds += 1
            live = [b for b in brokers.values() if b.pending]
            new_marks = False
            for b in live:
                if b.mark is None:
                    try:
                        b.mark = await op_queue_max(client, b.addr, timeout_s)
                        new_marks = True
                    except RocketqError as exc:
                        b.last_error = str(exc)
            if new_marks and on_marks is not None:
                on_marks({b.addr: b.mark for b in brokers.values() if b.mark is not None})
            sendable: list[StagedMessage] = []
            for b in live:
                if b.mark is None:
                    continue
                if b.in_doubt:
                    try:
                        ended = await ended_halves(client, b.addr, b.mark, timeout_s)
                    except RocketqError as exc:
                        b.last_error = str(exc)
                        continue
                    done = [off for off in b.pending if off in ended]
                    for off in done:
                        del b.pending[off]
                    report.found_ended += len(done)
                    report.committed += len(done)
                    b.in_doubt = False
                sendable.extend(b.pending.values())
            failures = await end_each(client, group, sendable, COMMIT, timeout_s)
            for m in sendable:
                reason = failures.get(m)
                b = brokers[m.addr]
                if reason is None:
                    del b.pending[m.tran_state_offset]
                    report.committed += 1
                else:
                    b.in_doubt = True
                    b.last_error = reason
            failing = [b for b in brokers.values() if b.pending]
            if not failing:
                return report
            now = loop.time()
            first_failure = now if first_failure is None else first_failure
            waited_ms = (now - first_failure) * 1000
            past_deadline = deadline_ms is not None and now_ms() + RETRY_INTERVAL_MS > deadline_ms
            if waited_ms >= retry_ms or past_deadline:
                doubt = sum(len(b.pending) for b in failing)
                why = "the write's commit deadline came" if past_deadline else f"retrying for {retry_ms} ms"
                raise CommitIncomplete(
                    f"commit incomplete: {report.committed} of {len(staged)} rows published; "
                    f"{doubt} rows on {len(failing)} broker(s) in doubt after {why}: "
                    f"{describe_in_doubt(failing)}. A row in doubt is published only if its "
                    f"broker executed the commit before it failed (visible once the broker is "
                    f"back); otherwise the broker's transaction check discards it",
                    {b.addr: list(b.pending.values()) for b in failing},
                )
            log.warning(
                "commit of %d rows not confirmed yet; retrying in %d ms: %s",
                sum(len(b.pending) for b in failing),
                RETRY_INTERVAL_MS,
                describe_in_doubt(failing),
            )
            await asyncio.sleep(RETRY_INTERVAL_MS / 1000)
    finally:
        await client.close()


__all__ = [
    "END_CONCURRENCY",
    "CommitIncomplete",
    "CommitReport",
    "commit_halves",
    "end_each",
    "ended_halves",
    "op_queue_max",
]

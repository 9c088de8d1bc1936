"""Writes (batch and streaming) through transactional half messages.

A write is a two-phase commit on the brokers' transaction machinery::

    task (executor)   each row → a half message (TransactionProducer, local state UNKNOW), in
                      row order, same shardingKey → same queue; returns a StagedBatch naming
                      every half (broker address, half queue offset, commit-log offset, msg id)
                      task fails → it rolls back what it staged, then re-raises
    driver commit()   END_TRANSACTION COMMIT (37, answered) for every half → visible in topics;
                      a broker that fails midway is retried for ``commitRetryMs`` without
                      committing a half twice, then the error names the queues in doubt
                      (rules in :mod:`rocketq.spark.commit`)
    driver abort()    END_TRANSACTION ROLLBACK for every half of the job: those the tasks
                      reported, and those of tasks killed before reporting, found by pulling
                      the half queue of every master from where it stood when the job was
                      planned and keeping the halves of the job's own producer group; swept
                      again until none appeared for 3 s (at most 15 s), as tasks Spark is still
                      cancelling may stage a few more

Nothing a task staged becomes visible unless the driver commits it. Halves nobody ends are
asked about by the broker's transaction check: while the staging task still runs its producer
answers UNKNOW; a half older than ``writeTimeoutMs`` gets ROLLBACK. After the task ends no
producer of the job's group is left, the broker's checks find nobody, and after
``transactionCheckMax`` checks the half is discarded (moved to TRANS_CHECK_MAX_TIME_TOPIC) —
never published. The driver refuses to commit halves staged more than ``writeTimeoutMs`` minus
a margin ago (it aborts instead), so a commit never races a check's ROLLBACK. Window: rows are
committable for ``writeTimeoutMs`` (default 10 min), which must stay below the broker's
``transactionCheckMax × transactionCheckInterval`` (15 × 60 s by default).

Streaming sink: ``commit(messages, batchId)`` records the batch in
``<checkpointLocation>/rocketq-sink/<batchId>.json`` — ``committing`` (with the halves) before
ending the transactions, ``committed`` after. A replayed batch whose marker says ``committed``
rolls its new halves back; one that says ``committing`` (the driver or a broker died
mid-commit) commits the recorded halves again and rolls the new ones back. The marker also
records each broker's op mark, written before the first END_TRANSACTION goes to that broker, so
the replay skips halves a restarted broker had already ended. So a batch is published once. The
marker lives on the driver's local file system.

Order: rows of one task keep their order within each queue; across tasks order follows
partitions only as far as Spark runs them (no order between tasks).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import pathlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from rocketq.client.aio import SendStatus
from rocketq.client.transaction import AsyncTransactionProducer, LocalTransactionState
from rocketq.errors import ConfigError, RocketqError
from rocketq.fileio import durable_replace
from rocketq.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    Message,
    MessageExt,
    decode_offset_msg_id,
)
from rocketq.protocol.route import MASTER_ID
from rocketq.protocol.topic import TRANS_HALF_TOPIC
from rocketq.remoting import RemotingClient, RequestCode
from rocketq.spark import cluster
from rocketq.spark.commit import CommitIncomplete, CommitReport, commit_halves, end_each
from rocketq.spark.options import TlsOptions, WriteOptions
from rocketq.spark.pull import pull_once
from rocketq.spark.staged import (
    COMMIT,
    ROLLBACK,
    StagedBatch,
    StagedMessage,
    StagedWriteError,
    now_ms,
)

log = logging.getLogger(__name__)

#: Columns the writer uses; other columns are ignored.
WRITE_COLUMNS = ("body", "topic", "tags", "keys", "properties", "shardingKey")
#: The driver commits only halves younger than writeTimeoutMs minus this share of it.
COMMIT_MARGIN_FRACTION = 0.1
MARKER_DIR = "rocketq-sink"


def check_write_schema(field_types: Mapping[str, str], default_topic: str | None) -> None:
    """Reject a DataFrame the writer cannot publish (names the column and the expectation)."""
    problems: list[str] = []
    body = field_types.get("body")
    if body is None:
        problems.append("a column 'body' (binary or string) is required")
    elif body not in ("binary", "string"):
        problems.append(f"column 'body' must be binary or string, not {body}")
    if "topic" not in field_types and default_topic is None:
        problems.append("give a 'topic' column or the topic option")
    expected = {
        "topic": ("string",),
        "tags": ("string",),
        "keys": ("string", "array<string>"),
        "properties": ("map<string,string>",),
        "shardingKey": ("string",),
    }
    for name, allowed in expected.items():
        kind = field_types.get(name)
        if kind is not None and kind not in allowed:
            problems.append(f"column {name!r} must be {' or '.join(allowed)}, not {kind}")
    if problems:
        raise ConfigError("cannot write this DataFrame to rocketq: " + "; ".join(problems))


def row_to_message(row: Mapping[str, Any], default_topic: str | None) -> tuple[Message, str | None]:
    """The message for one row (as a dict) and its sharding key."""
    body = row.get("body")
    if body is None:
        raise ConfigError("a row has a null body; every message needs one")
    if isinstance(body, str):
        body = body.encode("utf-8")
    topic = row.get("topic") or default_topic
    if not topic:
        raise ConfigError("a row has no topic and no topic option is set")
    keys = row.get("keys")
    if isinstance(keys, str):
        keys = keys.split()
    props = row.get("properties") or {}
    msg = Message(
        topic=topic,
        body=bytes(body),
        tags=row.get("tags") or None,
        keys=tuple(keys or ()),
        properties={str(k): str(v) for k, v in props.items() if v is not None},
    )
    return msg, row.get("shardingKey")


# -- staging (executors) -----------------------------------------------------------------------
async def _stage(opts: WriteOptions, group: str, rows: Iterator[Any], partition_id: int) -> StagedBatch:
    timeout_ms = opts.write_timeout_ms

    def check(half: MessageExt) -> LocalTransactionState:
        if now_ms() - half.born_timestamp > timeout_ms:
            return LocalTransactionState.ROLLBACK_MESSAGE
        return LocalTransactionState.UNKNOW

    def unknown(_msg: Message, _arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    producer = AsyncTransactionProducer(
        group,
        config=cluster.acl_config(opts.keys, opts.tls),
        namesrv_addr=opts.name_server,
        check_listener=check,
        send_timeout_ms=opts.send_timeout_ms,
    )
    await producer.start()
    staged: list[StagedMessage] = []
    started = now_ms()
    try:
        for row in rows:
            msg, key = row_to_message(row.asDict(), opts.topic)
            sent = await producer.send_message_in_transaction(msg, unknown, sharding_key=key)
            if sent.status is not SendStatus.SEND_OK:
                raise StagedWriteError(f"half message to {msg.topic} not stored cleanly: {sent.status.name}")
            where = decode_offset_msg_id(sent.offset_msg_id)
            staged.append(
                StagedMessage(
                    where.address,
                    msg.topic,
                    sent.queue_offset,
                    where.offset,
                    sent.transaction_id or sent.msg_id,
                    sent.message_queue.broker_name,
                    sent.message_queue.queue_id,
                )
            )
    except BaseException:
        if staged:
            log.warning("write task %d failed; rolling back %d staged messages", partition_id, len(staged))
            try:
                await end_transactions(group, staged, ROLLBACK, opts.request_timeout_ms, opts.keys, opts.tls)
            except RocketqError as exc:
                log.warning(
                    "rollback after a failed write task incomplete (the broker's check "
                    "discards the rest): %s",
                    exc,
                )
        raise
    finally:
        await producer.shutdown()
    return StagedBatch(partition_id, started, staged)


def stage_rows(opts: WriteOptions, group: str, rows: Iterator[Any]) -> StagedBatch:
    """Send every row as a half message (runs in a write task)."""
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    return asyncio.run(_stage(opts, group, rows, partition_id))


# -- ending (driver) ---------------------------------------------------------------------------
async def end_transactions(
    group: str,
    staged: Sequence[StagedMessage],
    kind: int,
    timeout_ms: int,
    keys: tuple[str, str] | None = None,
    tls: TlsOptions | None = None,
) -> int:
    """END_TRANSACTION ``kind`` for every half, once (signed with ``keys`` when given, over
    ``tls`` when given); StagedWriteError names the failures."""
    client = RemotingClient(rpc_hook=cluster.acl_hook(keys), ssl=cluster.ssl_context(tls))
    try:
        failures = await end_each(client, group, staged, kind, timeout_ms / 1000)
    finally:
        await client.close()
    if failures:
        what = "commit" if kind == COMMIT else "rollback"
        detail = "; ".join(f"{m.msg_id}@{m.addr}: {why}" for m, why in list(failures.items())[:5])
        raise StagedWriteError(f"{what} of {len(failures)} of {len(staged)} staged messages failed: {detail}")
    return len(staged)


def _flatten(messages: Iterable[WriterCommitMessage | None]) -> tuple[list[StagedMessage], int | None]:
    staged: list[StagedMessage] = []
    oldest: int | None = None
    for m in messages:
        if isinstance(m, StagedBatch):
            staged.extend(m.messages)
            if m.messages:
                oldest = m.staged_at_ms if oldest is None else min(oldest, m.staged_at_ms)
    return staged, oldest


def _commit_deadline_ok(opts: WriteOptions, oldest_ms: int | None) -> bool:
    if oldest_ms is None:
        return True
    allowed = opts.write_timeout_ms * (1 - COMMIT_MARGIN_FRACTION)
    return now_ms() - oldest_ms <= allowed


def _commit_deadline_ms(opts: WriteOptions, oldest_ms: int | None) -> int | None:
    if oldest_ms is None:
        return None
    return oldest_ms + int(opts.write_timeout_ms * (1 - COMMIT_MARGIN_FRACTION))


def commit_staged(
    opts: WriteOptions,
    group: str,
    staged: Sequence[StagedMessage],
    oldest_ms: int | None,
    *,
    marks: Mapping[str, int] | None = None,
    on_marks: Callable[[dict[str, int]], None] | None = None,
) -> CommitReport:
    """End every staged half COMMIT (retrying brokers that fail, see :mod:`rocketq.spark.commit`),
    or roll all back when they are too old to commit safely."""
    if not _commit_deadline_ok(opts, oldest_ms):
        rollback_staged(opts, group, staged)
        raise StagedWriteError(
            f"rows were staged {now_ms() - (oldest_ms or 0)} ms ago, beyond writeTimeoutMs="
            f"{opts.write_timeout_ms} less the safety margin; rolled back instead of committing"
        )
    report = asyncio.run(
        commit_halves(
            group,
            staged,
            timeout_ms=opts.request_timeout_ms,
            retry_ms=opts.commit_retry_ms,
            deadline_ms=_commit_deadline_ms(opts, oldest_ms),
            marks=marks,
            on_marks=on_marks,
            rpc_hook=cluster.acl_hook(opts.keys),
            ssl=cluster.ssl_context(opts.tls),
        )
    )
    log.info(
        "rocketq write committed %d messages (producer group %s, %d rounds, %d found already ended)",
        report.committed,
        group,
        report.rounds,
        report.found_ended,
    )
    return report


def rollback_staged(opts: WriteOptions, group: str, staged: Sequence[StagedMessage]) -> None:
    try:
        asyncio.run(end_transactions(group, staged, ROLLBACK, opts.request_timeout_ms, opts.keys, opts.tls))
    except StagedWriteError as exc:
        log.warning("%s (the broker's check discards them)", exc)


# -- sweeping a failed job's halves (driver) ---------------------------------------------------------
#: Half messages pulled per request while sweeping.
SWEEP_BATCH = 256


def half_queue_marks(opts: WriteOptions) -> dict[str, int]:
    """Master address → max offset of its half-message queue, before a job stages anything."""

    async def work(session: cluster.Session) -> dict[str, int]:
        marks: dict[str, int] = {}
        for entry in await session.admin.cluster_list():
            if entry.broker_id != MASTER_ID:
                continue
            fields: dict[str, object] = {"topic": TRANS_HALF_TOPIC, "queueId": 0}
            try:
                response = await session.call(entry.addr, RequestCode.GET_MAX_OFFSET, fields, entry.addr)
                marks[entry.addr] = int(response.ext_fields.get("offset", 0))
            except RocketqError:
                marks[entry.addr] = 0  # no half queue yet
        return marks

    return cluster.run(opts.name_server, opts.request_timeout_ms, work, opts.keys, opts.tls)


async def _halves_of_group(
    client: RemotingClient, addr: str, start: int, group: str, timeout_s: float
) -> tuple[list[StagedMessage], int]:
    """The original halves of ``group`` in ``addr``'s half queue from ``start``, and where the
    queue ended."""
    out: list[StagedMessage] = []
    offset = start
    while True:
        pulled = await pull_once(client, addr, TRANS_HALF_TOPIC, 0, offset, SWEEP_BATCH, timeout_s)
        for m in pulled.messages:
            props = m.properties
            if (
                props.get(PROPERTY_PRODUCER_GROUP) != group
                or PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET in props
            ):
                continue  # another producer's, or a copy made by a check (the original is ended)
            topic = props.get(PROPERTY_REAL_TOPIC, "")
            out.append(StagedMessage(addr, topic, m.queue_offset, m.commit_log_offset, m.uniq_key or ""))
        if pulled.next_offset <= offset:
            return out, offset
        offset = pulled.next_offset


#: How long an abort keeps sweeping for halves of tasks that are still being cancelled, and
#: how long the half queues must stay free of the job's halves before it stops early.
SWEEP_SETTLE_MS = 15_000
SWEEP_QUIET_MS = 3_000


def sweep_rollback(
    opts: WriteOptions, group: str, marks: Mapping[str, int], known: Sequence[StagedMessage]
) -> int:
    """Roll back every half of ``group`` stored since ``marks`` — including those of tasks that
    were killed before they could report them, and of tasks Spark is still cancelling (swept
    again until no new half appeared for ``SWEEP_QUIET_MS``, at most ``SWEEP_SETTLE_MS``) —
    plus ``known``. Returns how many were ended."""

    async def sweep(client: RemotingClient, positions: dict[str, int]) -> list[StagedMessage]:
        found: list[StagedMessage] = []
        for addr, start in positions.items():
            try:
                halves, positions[addr] = await _halves_of_group(
                    client, addr, start, group, opts.request_timeout_ms / 1000
                )
            except RocketqError as exc:
                log.warning("cannot list the half messages on %s: %s", addr, exc)
                continue
            found.extend(halves)
        return found

    async def work() -> int:
        client = RemotingClient(rpc_hook=cluster.acl_hook(opts.keys), ssl=cluster.ssl_context(opts.tls))
        loop = asyncio.get_running_loop()
        positions = dict(marks)
        ended = 0
        try:
            batch = {(m.addr, m.commit_log_offset): m for m in known}
            deadline = loop.time() + SWEEP_SETTLE_MS / 1000
            quiet_since = loop.time()
            while True:
                batch.update(((m.addr, m.commit_log_offset), m) for m in await sweep(client, positions))
                if batch:
                    quiet_since = loop.time()
                    try:
                        ended += await end_transactions(
                            group, list(batch.values()), ROLLBACK, opts.request_timeout_ms, opts.keys
                        )
                    except StagedWriteError as exc:
                        log.warning("%s (the broker's check discards them)", exc)
                    batch = {}
                now = loop.time()
                if now - quiet_since >= SWEEP_QUIET_MS / 1000 or now >= deadline:
                    return ended
                await asyncio.sleep(0.5)
        finally:
            await client.close()

    return asyncio.run(work())


def _group_for(opts: WriteOptions) -> str:
    return opts.producer_group or f"SPARK_ROCKETQ_{uuid.uuid4().hex[:16]}"


class BatchWriter(DataSourceWriter):
    """``df.write.format("rocketq")``: one job, committed or aborted by the driver."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.group = _group_for(opts)
        self.half_marks = half_queue_marks(opts)

    def write(self, iterator: Iterator[Any]) -> StagedBatch:
        return stage_rows(self.opts, self.group, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        staged, oldest = _flatten(messages)
        commit_staged(self.opts, self.group, staged, oldest)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        staged, _ = _flatten(messages)
        count = sweep_rollback(self.opts, self.group, self.half_marks, staged)
        log.warning("rocketq write aborted; rolled back %d staged messages", count)


# -- streaming sink ----------------------------------------------------------------------------
class SinkMarkers:
    """Per-batch markers in ``<checkpointLocation>/rocketq-sink`` (written atomically)."""

    KEEP = 100

    def __init__(self, checkpoint_location: str) -> None:
        location = checkpoint_location
        if location.startswith("file:"):
            location = location[len("file:") :].removeprefix("//")
        if "://" in location:
            raise ConfigError(
                f"the rocketq sink keeps its batch markers on the driver's local file system; "
                f"checkpointLocation {checkpoint_location!r} is not local"
            )
        self.dir = pathlib.Path(location) / MARKER_DIR

    def read(self, batch_id: int) -> dict[str, Any] | None:
        path = self.dir / f"{batch_id}.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise StagedWriteError(f"sink marker {path} is not JSON: {exc}") from None
        return doc if isinstance(doc, dict) else None

    def write(self, batch_id: int, doc: dict[str, Any]) -> None:
        path = self.dir / f"{batch_id}.json"
        durable_replace(str(path), json.dumps(doc).encode())
        for old in self.dir.glob("*.json"):
            stem = old.stem
            if stem.isdigit() and int(stem) < batch_id - self.KEEP:
                old.unlink(missing_ok=True)


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("rocketq")``: each micro-batch published once."""

    def __init__(self, opts: WriteOptions) -> None:
        assert opts.checkpoint_location is not None
        self.opts = opts
        # Spark builds the sink anew for its commit runner, so the group must not be random:
        # one per checkpoint (the same query across restarts)
        digest = hashlib.sha1(opts.checkpoint_location.encode(), usedforsecurity=False).hexdigest()
        self.group = opts.producer_group or f"SPARK_ROCKETQ_SINK_{digest[:16]}"
        self.markers = SinkMarkers(opts.checkpoint_location)

    def write(self, iterator: Iterator[Any]) -> StagedBatch:
        return stage_rows(self.opts, self.group, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged, oldest = _flatten(messages)
        marker = self.markers.read(batchId)
        if marker is not None:
            previous = [StagedMessage(**m) for m in marker.get("messages", [])]
            group = str(marker.get("group", self.group))
            log.warning(
                "rocketq sink: batch %d was %s before; rolling back its %d new messages",
                batchId,
                marker.get("state"),
                len(staged),
            )
            rollback_staged(self.opts, self.group, staged)
            if marker.get("state") != "committed":
                self._commit(batchId, marker, group, previous, None)
            return
        if not _commit_deadline_ok(self.opts, oldest):
            commit_staged(self.opts, self.group, staged, oldest)  # rolls back and raises
        doc = {"state": "committing", "group": self.group, "messages": [asdict(m) for m in staged]}
        self.markers.write(batchId, doc)
        self._commit(batchId, doc, self.group, staged, oldest)

    def _commit(
        self,
        batch_id: int,
        doc: dict[str, Any],
        group: str,
        staged: list[StagedMessage],
        oldest: int | None,
    ) -> None:
        """Commit ``staged`` with the op marks of an earlier attempt (if the marker has them),
        recording new marks in the marker before any END_TRANSACTION goes to their broker."""
        marks = {str(k): int(v) for k, v in dict(doc.get("opMarks") or {}).items()}

        def record(new_marks: dict[str, int]) -> None:
            nonlocal doc
            doc = {**doc, "opMarks": {**marks, **new_marks}}
            self.markers.write(batch_id, doc)

        commit_staged(self.opts, group, staged, oldest, marks=marks, on_marks=record)
        self.markers.write(batch_id, {**doc, "state": "committed"})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged, _ = _flatten(messages)
        log.warning("rocketq sink: batch %d aborted; rolling back %d staged messages", batchId, len(staged))
        rollback_staged(self.opts, self.group, staged)


__all__ = [
    "BatchWriter",
    "CommitIncomplete",
    "SinkMarkers",
    "StagedBatch",
    "StagedMessage",
    "StagedWriteError",
    "StreamWriter",
    "check_write_schema",
    "row_to_message",
]

"""The chaos workload: producers and consumers against a name server, every operation recorded.

:class:`Workload` runs on one asyncio event loop in a thread of its own (``start`` returns once
every client is started; ``stop`` ends them within a bound), so a test or a campaign runner
drives it from plain code while it injects faults:

* **Producers** (``producers``; the first ``sync_producers`` of them are the blocking
  :class:`~rocketq.client.Producer`, called from worker threads, the others
  :class:`~rocketq.client.AsyncProducer`). Each producer has *lanes*, each sending one message at
  a time (the next only once the previous one has ended): with ``sharding_keys``, lane ``j``
  of producer ``i`` sends with the sharding key ``k{i}-{j}`` (hash queue selection: one key, one
  queue, in order); otherwise lane ``j`` sends to queue ``j`` through a queue selector (one lane
  per queue, ``queues`` of them), or, with ``queues=0``, one lane lets the client pick. Payloads
  are unique, ``{prefix}p{i}-{seq}`` (also the message key); ``client_retries`` is the SDK's
  ``retry_times_when_send_failed`` (0: every attempt is one history op), ``resends`` the
  workload's own resends of a payload whose send failed or is indeterminate (each a new op,
  ``attempt`` counting). Each send is an ``invoke`` and an ``ok`` / ``fail`` / ``info`` op
  (:func:`~rocketq.testing.chaos.history.classify_send_error`).
* **Consumers**, all clustering and reading from the first offset: ``lite_pull_consumers``
  :class:`~rocketq.client.AsyncLitePullConsumer` of group ``{group_prefix}Lite`` (subscribe
  mode; ``poll`` ops, an ``ack`` op per owned queue at each commit) and ``push_consumers``
  :class:`~rocketq.client.AsyncPushConsumer` of group ``{group_prefix}Push`` (one consume worker,
  so a queue's messages reach the listener in queue order; a ``poll`` and an ``ack`` op per
  batch). A consumer's assignment, looked at around each poll or batch, is an ``assign`` op
  whenever it changed (the checker does not expect continuity across one).
* **Drain** (:meth:`Workload.drain`, after :meth:`Workload.stop`): every queue read from offset 0
  to its end through a fresh lite pull consumer of group ``{group_prefix}Drain`` (the master
  answers), as ``drain`` ops with ``node="leader"``. The replicas' own stores are read by
  :func:`rocketq.testing.chaos.replicas.replica_drain`.

Every wait is bounded: a send by ``send_timeout_ms``, a poll by ``poll_timeout_ms``, start,
stop and drain by their ``timeout_s``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rocketq.client import (
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    ClientConfig,
    ConsumeStatus,
    Message,
    MessageQueue,
    Producer,
    SendResult,
)
from rocketq.message import MessageExt
from rocketq.testing.chaos.history import (
    Op,
    Read,
    Recorder,
    classify_send_error,
    classify_send_status,
    now_fields,
)

log = logging.getLogger(__name__)

#: A pause after a failed send before the lane sends again (pace, not synchronisation).
FAILURE_PAUSE_S = 0.05


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """What :class:`Workload` runs (module docstring); times in milliseconds."""

    namesrv: str
    topic: str
    producers: int = 2
    sync_producers: int = 0
    queues: int = 4
    sharding_keys: bool = False
    keys_per_producer: int = 2
    client_retries: int = 0
    resends: int = 0
    send_timeout_ms: int = 3000
    lite_pull_consumers: int = 1
    push_consumers: int = 1
    poll_timeout_ms: int = 500
    commit_interval_ms: int = 1000
    group_prefix: str = "Chaos"
    #: put before every process name and payload (two workloads sharing one recorder differ)
    prefix: str = ""
    route_refresh_interval_ms: int = 500
    heartbeat_interval_ms: int = 1000
    rebalance_interval_ms: int = 2000

    def __post_init__(self) -> None:
        if self.producers < 0 or not 0 <= self.sync_producers <= self.producers:
            raise ValueError(f"sync_producers={self.sync_producers} must be in 0..producers={self.producers}")
        if self.queues < 0 or self.keys_per_producer < 1 or self.client_retries < 0 or self.resends < 0:
            raise ValueError("queues, client_retries and resends must be >= 0, keys_per_producer >= 1")

    def client_config(self) -> ClientConfig:
        return ClientConfig(
            namesrv_addr=self.namesrv,
            poll_name_server_interval_ms=self.route_refresh_interval_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            persist_consumer_offset_interval_ms=self.commit_interval_ms,
        )


def _reads(msgs: Sequence[MessageExt]) -> tuple[Read, ...]:
    return tuple(Read(m.queue_offset, m.body.decode("utf-8", "replace"), m.client_msg_id) for m in msgs)


class Workload:
    """See the module docstring. ``recorder`` receives every op."""

    def __init__(self, config: WorkloadConfig, recorder: Recorder) -> None:
        self.config = config
        self.recorder = recorder
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._seqs: dict[str, itertools.count[int]] = {}

    # -- life cycle -------------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> None:
        """Start every client and their loops; returns once all are started."""
        if self._thread is not None:
            raise RuntimeError("the workload was started already")
        self._thread = threading.Thread(target=self._run, name="chaos-workload", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"the workload's clients did not start within {timeout_s} s")
        if self._failed is not None:
            raise RuntimeError("the workload failed to start") from self._failed

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop sending and consuming, shut the clients down; waits at most ``timeout_s``."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is None or stop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop ended already
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)
        if thread.is_alive():
            raise TimeoutError(f"the workload did not stop within {timeout_s} s")
        if self._failed is not None:
            raise RuntimeError("the workload failed") from self._failed

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start / stop
            self._failed = exc
            log.exception("chaos workload failed")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        sync_lanes = cfg.sync_producers * max(1, self._lanes_per_producer())
        self._executor = concurrent.futures.ThreadPoolExecutor(max(1, sync_lanes), "chaos-sync-send")
        producers: list[tuple[str, AsyncProducer | Producer]] = []
        consumers: list[AsyncLitePullConsumer | AsyncPushConsumer] = []
        tasks: list[asyncio.Task[None]] = []
        try:
            for i in range(cfg.producers):
                kw: dict[str, Any] = {
                    "namesrv_addr": cfg.namesrv,
                    "send_timeout_ms": cfg.send_timeout_ms,
                    "retry_times_when_send_failed": cfg.client_retries,
                    "route_refresh_interval_ms": cfg.route_refresh_interval_ms,
                }
                group = f"{cfg.group_prefix}P{i}"
                if i < cfg.sync_producers:
                    sp = Producer(group, **kw)
                    await asyncio.to_thread(sp.start)
                    producers.append((f"{cfg.prefix}p{i}", sp))
                else:
                    ap = AsyncProducer(group, **kw)
                    await ap.start()
                    producers.append((f"{cfg.prefix}p{i}", ap))
            for i in range(cfg.lite_pull_consumers):
                lite = AsyncLitePullConsumer(
                    f"{cfg.group_prefix}Lite",
                    config=cfg.client_config(),
                    instance_name=f"lite{i}",
                    consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                    poll_timeout_ms=cfg.poll_timeout_ms,
                    rebalance_interval_ms=cfg.rebalance_interval_ms,
                )
                lite.subscribe(cfg.topic, "*")
                await lite.start()
                consumers.append(lite)
                tasks.append(asyncio.create_task(self._lite_loop(f"{cfg.prefix}lite{i}", lite)))
            for i in range(cfg.push_consumers):
                push = AsyncPushConsumer(
                    f"{cfg.group_prefix}Push",
                    config=cfg.client_config(),
                    instance_name=f"push{i}",
                    consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                    consume_thread_nums=1,
                    rebalance_interval_ms=cfg.rebalance_interval_ms,
                )
                push.subscribe(cfg.topic, "*")
                push.register_listener(self._push_listener(f"{cfg.prefix}push{i}", push))
                await push.start()
                consumers.append(push)
            for number, (name, producer) in enumerate(producers):
                for lane in range(self._lanes_per_producer()):
                    tasks.append(asyncio.create_task(self._lane(name, number, producer, lane)))
            self._ready.set()
            await self._stop.wait()
        finally:
            self._stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in consumers:
                await self._bounded(c.shutdown(), "consumer shutdown")
            for _, p in producers:
                if isinstance(p, Producer):
                    await asyncio.to_thread(p.shutdown)
                else:
                    await self._bounded(p.shutdown(), "producer shutdown")
            self._executor.shutdown(wait=False)

    async def _bounded(self, work: Awaitable[None], what: str) -> None:
        try:
            await asyncio.wait_for(work, self.config.send_timeout_ms / 1000 + 5)
        except Exception:
            log.warning("chaos workload: %s did not finish cleanly", what, exc_info=True)

    def _lanes_per_producer(self) -> int:
        cfg = self.config
        if cfg.sharding_keys:
            return cfg.keys_per_producer
        return max(1, cfg.queues)

    # -- producers --------------------------------------------------------------------------------
    def _next_payload(self, name: str) -> str:
        seq = self._seqs.setdefault(name, itertools.count())
        return f"{name}-{next(seq)}"

    async def _lane(self, name: str, number: int, producer: AsyncProducer | Producer, lane: int) -> None:
        cfg = self.config
        stop = self._stop
        assert stop is not None
        key = f"{cfg.prefix}k{number}-{lane}" if cfg.sharding_keys else None
        selector = None
        if not cfg.sharding_keys and cfg.queues > 0:
            selector = _queue_selector(lane)
        while not stop.is_set():
            payload = self._next_payload(name)
            for attempt in range(cfg.resends + 1):
                msg = Message(cfg.topic, payload.encode(), keys=[payload])
                inv = self.recorder.invoke(
                    name, "send", topic=cfg.topic, payload=payload, key=key, attempt=attempt,
                    client_retries=cfg.client_retries,
                )  # fmt: skip
                send = _sender(producer, msg, key, selector, self._executor)
                try:
                    result = await send()
                except Exception as exc:
                    phase, why = classify_send_error(exc, cfg.client_retries)
                    self.recorder.complete(inv, phase, error=why)
                    await asyncio.sleep(FAILURE_PAUSE_S)
                    if stop.is_set():
                        return
                    continue
                status = result.status.value
                self.recorder.complete(
                    inv, classify_send_status(status), queue=result.message_queue.queue_id,
                    offset=result.queue_offset, msg_id=result.msg_id, status=status,
                )  # fmt: skip
                if status == "SEND_OK":
                    break

    # -- consumers --------------------------------------------------------------------------------
    def _assignment(
        self, name: str, consumer: AsyncLitePullConsumer | AsyncPushConsumer, last: list[Any]
    ) -> None:
        owned = [mq for mq in consumer.assignment() if mq.topic == self.config.topic]
        now = [mq.queue_id for mq in owned]
        # A queue given away and owned again between two looks gets a new position object
        # (and starts again from the committed offset): compare positions by identity, and
        # keep them referenced so that an identity is never reused.
        states = [consumer.core.queue_state(mq) for mq in owned]
        same = bool(last) and last[0] == now and all(a is b for a, b in zip(last[1], states, strict=True))
        if not same:
            last[:] = [now, states]
            self.recorder.record(
                Op(name, "assign", "ok", topic=self.config.topic, queues=tuple(now), **_now())
            )

    async def _lite_loop(self, name: str, consumer: AsyncLitePullConsumer) -> None:
        cfg = self.config
        stop = self._stop
        assert stop is not None
        loop = asyncio.get_running_loop()
        last: list[Any] = []
        committed_at = loop.time()
        while not stop.is_set():
            self._assignment(name, consumer, last)
            try:
                msgs = await consumer.poll(timeout_ms=cfg.poll_timeout_ms)
            except Exception:
                log.debug("chaos lite pull %s: poll failed", name, exc_info=True)
                await asyncio.sleep(FAILURE_PAUSE_S)
                continue
            self._assignment(name, consumer, last)
            self._record_reads(name, msgs)
            if loop.time() - committed_at >= cfg.commit_interval_ms / 1000:
                committed_at = loop.time()
                await self._commit(name, consumer)

    async def _commit(self, name: str, consumer: AsyncLitePullConsumer) -> None:
        try:
            await consumer.commit()
        except Exception:
            log.debug("chaos lite pull %s: commit failed", name, exc_info=True)
            return
        for mq in consumer.assignment():
            state = consumer.core.queue_state(mq)
            if state is not None and state.offset is not None:
                self.recorder.record(
                    Op(name, "ack", "ok", topic=mq.topic, queue=mq.queue_id, offset=state.offset, **_now())
                )

    def _record_reads(self, name: str, msgs: Sequence[MessageExt]) -> None:
        by_queue: dict[int, list[MessageExt]] = {}
        for m in msgs:
            if m.topic == self.config.topic:
                by_queue.setdefault(m.queue_id, []).append(m)
        for q, batch in by_queue.items():
            self.recorder.record(
                Op(name, "poll", "ok", topic=self.config.topic, queue=q, reads=_reads(batch), **_now())
            )

    def _push_listener(
        self, name: str, consumer: AsyncPushConsumer
    ) -> Callable[[list[MessageExt]], Awaitable[ConsumeStatus]]:
        last: list[Any] = []

        async def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            self._assignment(name, consumer, last)
            self._record_reads(name, msgs)
            for m in msgs:
                self.recorder.record(
                    Op(
                        name,
                        "ack",
                        "ok",
                        topic=m.topic,
                        queue=m.queue_id,
                        offset=m.queue_offset + 1,
                        **_now(),
                    )
                )
            return ConsumeStatus.CONSUME_SUCCESS

        return listener

    # -- drain ------------------------------------------------------------------------------------
    def drain(self, timeout_s: float = 60.0) -> list[Op]:
        """Read every queue of the topic from offset 0 to its end through the master; the
        ``drain`` ops (also recorded). Call after :meth:`stop`."""
        return asyncio.run(asyncio.wait_for(self._drain(), timeout_s))

    async def _drain(self) -> list[Op]:
        cfg = self.config
        consumer = AsyncLitePullConsumer(
            f"{cfg.group_prefix}Drain", config=cfg.client_config(), instance_name="drain", auto_commit=False
        )
        await consumer.start()
        out: list[Op] = []
        try:
            queues = sorted(await consumer.fetch_message_queues(cfg.topic), key=lambda mq: mq.queue_id)
            for mq in queues:
                out += await self._drain_queue(consumer, mq)
        finally:
            await consumer.shutdown()
        return out

    async def _drain_queue(self, consumer: AsyncLitePullConsumer, mq: MessageQueue) -> list[Op]:
        end = await consumer.max_offset(mq)
        consumer.assign([mq])
        await consumer.seek(mq, 0)
        out: list[Op] = []
        at = 0
        while at < end:
            msgs = await consumer.poll(timeout_ms=2000)
            if not msgs:
                break
            op = Op(
                "drain",
                "drain",
                "ok",
                topic=mq.topic,
                queue=mq.queue_id,
                node="leader",
                reads=_reads(msgs),
                **_now(),
            )
            out.append(self.recorder.record(op))
            at = msgs[-1].queue_offset + 1
        return out


def _queue_selector(lane: int) -> Callable[[Sequence[MessageQueue], Message], MessageQueue]:
    def select(queues: Sequence[MessageQueue], _msg: Message) -> MessageQueue:
        for mq in queues:
            if mq.queue_id == lane:
                return mq
        return queues[lane % len(queues)]

    return select


def _sender(
    producer: AsyncProducer | Producer,
    msg: Message,
    key: str | None,
    selector: Callable[[Sequence[MessageQueue], Message], MessageQueue] | None,
    executor: concurrent.futures.Executor | None,
) -> Callable[[], Awaitable[SendResult]]:
    if isinstance(producer, Producer):
        sync = producer

        def call() -> SendResult:
            return sync.send(msg, sharding_key=key, selector=selector)

        return lambda: asyncio.get_running_loop().run_in_executor(executor, call)
    return lambda: producer.send(msg, sharding_key=key, selector=selector)


def _now() -> dict[str, Any]:
    return dict(now_fields())

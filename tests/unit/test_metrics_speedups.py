"""The counting of a broker's send path while metrics are on, compiled (``rocketq._speedups``:
RpcTimer, SendCounter) against its pure-Python reference (RpcLatency.call_pure,
BrokerMetrics._sent_pure): the same counters, the same scrape text, the same answers and
exceptions. The compiled half skips, saying why, when the C accelerator is not in use
(``ROCKETQ_PURE=1``, or not built); the pure half runs either way."""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketq import speedups
from rocketq.broker.config import BrokerConfig
from rocketq.broker.metrics import (
    DELAY,
    FIFO,
    MESSAGE_SIZE_BOUNDS,
    NORMAL,
    PUT_SECONDS_BOUNDS,
    TRANSACTION,
    BrokerMetrics,
)
from rocketq.config import StoreConfig
from rocketq.errors import ResponseCode, SystemBusy
from rocketq.message import Message
from rocketq.metrics.exposition import ThreadHistograms, render
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import DEFERRED, Deferred
from rocketq.remoting.rpc_metrics import RPC_LATENCY_MS_BOUNDS, RpcLatency
from rocketq.store.commitlog import PutMessageResult, PutMessageStatus
from rocketq.store.message_store import MessageStore
from rocketq.store.put_latency import PUT_LATENCY_SAMPLE, put_samples

compiled_only = pytest.mark.skipif(
    speedups.COMPILED is None, reason=f"compiled counting not in use: {speedups.REASON}"
)
MODES = [pytest.param(True, marks=compiled_only, id="compiled"), pytest.param(False, id="pure")]


def result(size: int, count: int = 1) -> PutMessageResult:
    return PutMessageResult.of(PutMessageStatus.PUT_OK, 0, size, 0, 0, b"", count)


def random_sends(seed: int, n: int) -> list[tuple[str, Any, int, int, bool]]:
    """(topic, kind, bytes, messages, through sent or stored): kinds as labels and as the
    properties a send has (typed keys alone, together, none), sizes on and around the bounds,
    topics of one length and of other kinds of characters."""
    rng = random.Random(seed)
    props = [
        {"TAGS": "a"},
        {},
        {"__SHARDINGKEY": "k"},
        {"__SHARDINGKEY": "k", "DELAY": "3"},
        {"DELAY": "3"},
        {"TIMER_DELIVER_MS": "1"},
        {"__STARTDELIVERTIME": "5", "KEYS": "x"},
        {"TIMER_DELAY_SEC": "1"},
        {"TIMER_DELAY_MS": "1"},
        {"DELAX": "1", "__SHARDINGKEZ": "k"},  # a typed key's length, not its name
        {1: "a non-str key"},
    ]
    sizes = [0, 1, 1023, 1024, 1025, 4096, 4097, 512 * 1024, 4 * 1024 * 1024, 4 * 1024 * 1024 + 1, 9 << 20]
    out = []
    for _ in range(n):
        kind: Any = rng.choice([NORMAL, TRANSACTION, FIFO, DELAY, *props])
        count = rng.choice([1, 1, 1, 2, 7])
        size = rng.choice(sizes) * count + rng.randint(0, count - 1)
        topic = rng.choice(["T", "U", "%RETRY%G", "T2", "T3", "Té", "T中", "TT"])
        fresh = (topic + "!")[:-1]  # an equal str that is another object, as each decoded send has
        out.append((fresh, kind, size, count, rng.random() < 0.8))
    return out


def count_sends(
    metrics: BrokerMetrics, sends: list[tuple[str, Any, int, int, bool]], fold_every: int
) -> None:
    for i, (topic, kind, size, count, through_sent) in enumerate(sends):
        if through_sent:
            metrics.sent(topic, kind, result(size, count))
        else:
            metrics.stored(topic, kind, size, count)
        if fold_every and i % fold_every == fold_every - 1:
            metrics.fold()


@compiled_only
@pytest.mark.parametrize("seed", range(6))
def test_compiled_and_pure_count_the_same_sends(seed: int) -> None:
    """Random sends of several topics and types, folded now and then (one topic and type in a
    batch too): the same messages_in, in the same order, and the same scrape text."""
    sends = random_sends(seed, 400)
    if seed == 0:
        sends = [("T", {"TAGS": "a"}, 136 + i % 3, 1, True) for i in range(300)]
    config = BrokerConfig(broker_name="b1", broker_cluster_name="c1")
    compiled, pure = BrokerMetrics(config, compiled=True), BrokerMetrics(config, compiled=False)
    for metrics in (compiled, pure):
        count_sends(metrics, sends, fold_every=[0, 50, 97, 400, 1, 13][seed])
    compiled_text, pure_text = render(compiled._counter_families()), render(pure._counter_families())
    assert list(compiled.messages_in.items()) == list(pure.messages_in.items())
    assert compiled_text == pure_text
    expected: dict[tuple[str, str], list[int]] = {}
    for topic, kind, size, count, _ in sends:
        mtype = kind if isinstance(kind, str) else pure_type(kind)
        c = expected.setdefault((topic, mtype), [0] * (len(MESSAGE_SIZE_BOUNDS) + 3))
        c[0] += count
        c[1] += size
        c[2 + bisect.bisect_left(MESSAGE_SIZE_BOUNDS, size // count)] += count
    assert compiled.messages_in == expected


def pure_type(props: dict[str, str]) -> str:
    if "__SHARDINGKEY" in props:
        return FIFO
    delay = {"DELAY", "__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS"}
    return DELAY if delay & set(props) else NORMAL


@pytest.mark.parametrize("compiled", MODES)
def test_a_send_with_bad_values_is_refused_clearly(compiled: bool) -> None:
    metrics = BrokerMetrics(BrokerConfig(), compiled=compiled)
    if compiled:
        with pytest.raises(ValueError, match="unknown message type 'weird'"):
            metrics.sent("T", "weird", result(10))
        with pytest.raises(ValueError, match="at least one message"):
            metrics.stored("T", NORMAL, 10, 0)
        with pytest.raises(TypeError, match="topic must be a str"):
            metrics.sent(b"T", NORMAL, result(10))  # type: ignore[arg-type]
    metrics.sent("T", NORMAL, result(10))
    metrics.fold()
    assert metrics.messages_in == {("T", NORMAL): [1, 10, 1, 0, 0, 0, 0, 0, 0]}


def test_the_broker_uses_the_compiled_counting_exactly_when_the_accelerator_is_in_use() -> None:
    metrics = BrokerMetrics(BrokerConfig())
    if speedups.COMPILED is None:
        assert metrics.sent == metrics._sent_pure and metrics.rpc.call == metrics.rpc.call_pure
        with pytest.raises(ValueError, match="not in use"):
            BrokerMetrics(BrokerConfig(), compiled=True)
    else:
        assert type(metrics.sent).__name__ == type(metrics.rpc.call).__name__ == "builtin_function_or_method"


# -- the request timing -------------------------------------------------------------------------


class Handlers:
    """Immediate handlers with each kind of outcome, each timing itself from the inside."""

    def __init__(self) -> None:
        self.inner_ns: list[int] = []

    def spin(self, ns: int) -> None:
        began = time.perf_counter_ns()
        while time.perf_counter_ns() - began < ns:
            pass
        self.inner_ns.append(time.perf_counter_ns() - began)

    def answer_bytes(self, conn: object, request: RemotingCommand) -> bytes:
        self.spin(50_000)
        return b"answer"

    def answer_command(self, conn: object, request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand(ResponseCode.SYSTEM_BUSY, opaque=request.opaque)

    def answer_none(self, conn: object, request: RemotingCommand) -> None:
        return None

    def answer_later(self, conn: object, request: RemotingCommand) -> Deferred:
        return DEFERRED  # a DLedger send: timed when its answer is given, not here

    def busy(self, conn: object, request: RemotingCommand) -> bytes:
        raise SystemBusy("too many")

    def broken(self, conn: object, request: RemotingCommand) -> bytes:
        raise KeyError("x")

    def interrupted(self, conn: object, request: RemotingCommand) -> bytes:
        raise KeyboardInterrupt


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What ``fn(*args)`` gives: ("value", its value), or the name and text of what it raised
    (KeyboardInterrupt too)."""
    try:
        return "value", fn(*args)
    except BaseException as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("compiled", MODES)
def test_the_timed_call_answers_and_counts_as_the_pure_one(compiled: bool) -> None:
    """Every outcome of a handler: the same answer or exception as an untimed call, and the same
    (request code, response code) counts as the pure reference; a bytes answer's latency lies
    between what the handler measured inside and what the caller measured around the call."""
    handlers = Handlers()
    send, pull = RemotingCommand(int(RequestCode.SEND_MESSAGE_V2), opaque=7), RemotingCommand(11, opaque=8)
    cases: list[tuple[Callable[..., Any], RemotingCommand]] = [
        (handlers.answer_bytes, send),
        (handlers.answer_bytes, send),
        (handlers.answer_bytes, RemotingCommand(int(RequestCode.SEND_BATCH_MESSAGE))),
        (handlers.answer_command, send),
        (handlers.answer_none, pull),
        (handlers.answer_later, send),
        (handlers.busy, send),
        (handlers.broken, pull),
        (handlers.interrupted, send),
    ]
    rpc, reference = RpcLatency(compiled), RpcLatency(False)
    outer_ns = []
    for handler, request in cases:
        plain = outcome(handler, None, request)
        began = time.perf_counter_ns()
        timed = outcome(rpc.call, handler, None, request)
        outer_ns.append(time.perf_counter_ns() - began)
        assert timed == plain
        assert outcome(reference.call, handler, None, request) == plain
    rpc.fold()
    reference.fold()
    counts = {key: sum(h.counts) for key, h in rpc.table.items()}
    assert counts == {key: sum(h.counts) for key, h in reference.table.items()}
    assert counts == {
        (int(RequestCode.SEND_MESSAGE_V2), int(ResponseCode.SUCCESS)): 2,
        (int(RequestCode.SEND_BATCH_MESSAGE), int(ResponseCode.SUCCESS)): 1,
        (int(RequestCode.SEND_MESSAGE_V2), int(ResponseCode.SYSTEM_BUSY)): 2,
        (11, int(ResponseCode.SYSTEM_ERROR)): 1,
    }
    sends = rpc.table[(int(RequestCode.SEND_MESSAGE_V2), int(ResponseCode.SUCCESS))]
    inner = handlers.inner_ns[1], handlers.inner_ns[4]  # this rpc's (each case: plain, rpc, reference)
    assert sum(inner) / 1e6 <= sends.sum <= (outer_ns[0] + outer_ns[1]) / 1e6
    expected = [0] * (len(RPC_LATENCY_MS_BOUNDS) + 1)
    for least, most in zip(inner, outer_ns[:2], strict=True):
        bucket = bisect.bisect_left(RPC_LATENCY_MS_BOUNDS, least / 1e6)
        if bucket != bisect.bisect_left(RPC_LATENCY_MS_BOUNDS, most / 1e6):
            return  # the machine paused the call across a bound: its bucket is not known here
        expected[bucket] += 1
    assert sends.counts == expected


@compiled_only
def test_a_timed_exception_keeps_its_traceback_and_a_failing_record_propagates() -> None:
    rpc = RpcLatency(True)
    with pytest.raises(SystemBusy) as raised:
        rpc.call(Handlers().busy, None, RemotingCommand(10))  # type: ignore[arg-type]
    assert raised.traceback[-1].name == "busy"

    def refuse(*args: object) -> None:
        raise RuntimeError("record refused")

    timer = speedups.COMPILED.RpcTimer((1, 2), refuse, refuse)  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="record refused"):
        timer.call(Handlers().broken, None, RemotingCommand(10))
    with pytest.raises(RuntimeError, match="record refused"):
        timer.call(Handlers().answer_command, None, RemotingCommand(10))
    with pytest.raises(TypeError, match="3 arguments"):
        timer.call(Handlers().answer_none, None)
    with pytest.raises(ValueError, match="ascend"):
        speedups.COMPILED.RpcTimer((2, 1), refuse, refuse)  # type: ignore[union-attr]
    assert timer.drain() == []


# -- the store's put sample ---------------------------------------------------------------------


@pytest.mark.parametrize("compiled", MODES)
def test_the_put_sample_reads_the_clock_once_in_each_run_of_puts(compiled: bool) -> None:
    samples = put_samples(compiled)
    for _ in range(3):
        taken = [next(samples) for _ in range(PUT_LATENCY_SAMPLE)]
        assert taken[:-1] == [0] * (PUT_LATENCY_SAMPLE - 1)
        assert 0 < taken[-1] <= time.perf_counter_ns()


def test_a_store_times_one_put_in_each_run_of_puts_while_it_has_histograms(tmp_path: Path) -> None:
    """The put sample restarts when the histograms are set; without them no put is timed."""
    cfg = StoreConfig(store_path_root_dir=str(tmp_path))
    with MessageStore(cfg) as store:
        for _ in range(5):
            assert store.put_message(Message("T", b"before")).ok
        hists = ThreadHistograms(PUT_SECONDS_BOUNDS)
        store.put_latency = hists
        assert store.put_latency is hists
        for i in range(PUT_LATENCY_SAMPLE * 3 - 1):
            msgs = [Message("T", b"x")] * 2
            assert (store.put_messages(msgs) if i % 2 else store.put_message(Message("T", b"y"))).ok
        assert hists.merged().count == 2
        store.put_message(Message("T", b"the third"))
        assert hists.merged().count == 3
        store.put_latency = None
        for _ in range(PUT_LATENCY_SAMPLE * 2):
            store.put_message(Message("T", b"after"))
        assert hists.merged().count == 3


@compiled_only
def test_the_compiled_put_observation_fills_each_threads_histogram_as_the_pure_one() -> None:
    """PutSampler.observe against MessageStore._put_timed's arithmetic: puts that began 30 ms,
    200 ms and 2 s ago (far from any bound) land in the same buckets, each thread's in its own
    histogram, with sums that agree."""
    hists = ThreadHistograms(PUT_SECONDS_BOUNDS)
    sampler = put_samples(True, hists)
    ago = (0.03, 0.2, 2.0, 0.03)

    def observe_all() -> None:
        for seconds in ago:
            sampler.observe(time.perf_counter_ns() - int(seconds * 1e9))  # type: ignore[attr-defined]

    observe_all()
    other = threading.Thread(target=observe_all)
    other.start()
    other.join()
    observe_all()
    mine = hists.local()
    expected = [0] * (len(PUT_SECONDS_BOUNDS) + 1)
    for seconds in ago:
        expected[bisect.bisect_left(PUT_SECONDS_BOUNDS, seconds)] += 2
    assert mine.counts == expected
    assert mine.sum == pytest.approx(2 * sum(ago), abs=0.05)
    assert hists.merged().count == 3 * len(ago)
    with pytest.raises(RuntimeError, match="without histograms"):
        put_samples(True).observe(0)  # type: ignore[attr-defined]

"""``rocketmq_rpc_latency``: the time a remoting server takes per request, by request and
response code (RocketMQ 5's ``RemotingMetricsManager``), shared by the broker and the name server.

Every request is timed (``_count`` is the number of requests): ``perf_counter_ns`` read before
the handler and after its answer, the elapsed milliseconds added to the histogram of the
(request code, response code) pair, no lock (every handler runs on the server's event loop
thread). With metrics off nothing is timed and a request pays nothing.

Two ways in. The broker times its requests in its own dispatch methods: ``Broker._handle``
inline, ``Broker._handle_now`` (the immediate answers, a send's among them) through
:attr:`RpcLatency.call`, which calls the handler and times it in one call: compiled
(``rocketq._speedups.RpcTimer``) when the C accelerator is in use, else
:meth:`RpcLatency.call_pure`, the reference. The name server's handler tables are wrapped once
at start, :meth:`RpcLatency.instrument` (a wrapper's ``__wrapped__`` is the handler it times).
On the hottest path, an immediate handler's SUCCESS (the pre-encoded answer of a send), the
pure path only appends the elapsed time to its request code's list in :attr:`RpcLatency.ok`,
folded into the histogram by the batch (:meth:`RpcLatency.fold`, which the broker calls every
second and before every scrape): in the middle of a send each extra lookup costs several
times what it costs in a tight loop. The compiled timer adds it to per-code bucket counts and
a sum of its own, which the fold adds to the histogram: the same counts and the same sum (the
nanoseconds of a fold's batch summed, then turned into milliseconds). The latency of a request
answered inside ``data_received`` (the immediate table) is recorded there; one the immediate
handler passes on is recorded by the task path instead, never twice. A held pull's latency
includes its hold (RocketMQ labels those ``is_long_polling``; rocketq tells them by their
response code, ``pull_not_found`` after a
hold that found nothing).

Label values are RocketMQ's: the code's constant name in lower case (``send_message_v2``,
``success``), the number for a code without a name.
"""

from __future__ import annotations

import functools
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Any

from rocketq import speedups
from rocketq.errors import ResponseCode, RocketqError
from rocketq.metrics.exposition import HISTOGRAM, Family, Histogram, Labels, add_to_buckets
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import (
    DEFERRED,
    Connection,
    Deferred,
    DeferringHandler,
    ImmediateHandler,
    RequestHandler,
)

#: RocketMQ's ``rpc_latency`` buckets (milliseconds).
RPC_LATENCY_MS_BOUNDS = (1, 3, 5, 10, 100, 1000, 3000)

#: The bounds in nanoseconds, the unit a request is timed in (folding compares the integers).
_BOUNDS_NS = tuple(ms * 1_000_000 for ms in RPC_LATENCY_MS_BOUNDS)

_perf_ns = time.perf_counter_ns

_REQUEST_NAMES = {int(c): c.name.lower() for c in RequestCode}
_RESPONSE_NAMES = {int(c): c.name.lower() for c in ResponseCode}


def code_name(code: int, names: Mapping[int, str] = _REQUEST_NAMES) -> str:
    """The label value of a request code (response codes: pass ``response_names()``)."""
    return names.get(code) or str(code)


class PendingOk(dict[int, list[int]]):
    """Request code → the elapsed nanoseconds of its SUCCESS answers not yet folded; a code
    seen for the first time gets its list (``pending[code].append(ns)``, no lookup first)."""

    def __missing__(self, code: int) -> list[int]:
        pending = self[code] = []
        return pending


#: ``call(handler, conn, request)``: the handler's answer, timed (see RpcLatency.call).
TimedCall = Callable[
    [DeferringHandler, Connection, RemotingCommand], "RemotingCommand | bytes | Deferred | None"
]


class RpcLatency:
    """Latency histograms (milliseconds) by (request code, response code). ``compiled``: None
    uses the C accelerator when it is in use, False never, True always (see
    :func:`rocketq.speedups.module_for`)."""

    def __init__(self, compiled: bool | None = None) -> None:
        self.table: dict[tuple[int, int], Histogram] = {}
        #: SUCCESS answers of immediate handlers not yet folded: per request code, the
        #: elapsed nanoseconds (one int appended per send, no tuple).
        self.ok = PendingOk()
        module = speedups.module_for(compiled)
        self._timer = (
            None if module is None else module.RpcTimer(_BOUNDS_NS, self.record, self.failed, DEFERRED)
        )
        #: ``call(handler, conn, request)``: ``handler(conn, request)`` timed, its latency counted
        #: by its request code and answer (an exception's code before it propagates) — the
        #: broker's dispatch of an immediate request. Compiled, or :meth:`call_pure`.
        self.call: TimedCall = self.call_pure if self._timer is None else self._timer.call

    def call_pure(
        self, handler: DeferringHandler, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | bytes | Deferred | None:
        """:attr:`call` in Python, the reference of the compiled one: a bytes answer (a send's
        pre-encoded SUCCESS) appended to :attr:`ok`, any other answer recorded at once but
        :data:`~rocketq.remoting.connection.DEFERRED` (the answer comes later and is timed then)."""
        began = _perf_ns()
        try:
            response = handler(conn, request)
        except BaseException as exc:
            self.failed(request.code, exc, _perf_ns() - began)
            raise
        if response.__class__ is bytes:
            self.ok[request.code].append(_perf_ns() - began)
        elif response is not None and response is not DEFERRED:  # a deferred answer times itself
            self.record(request.code, response.code, _perf_ns() - began)  # type: ignore[union-attr]
        return response

    def record(self, code: int, response_code: int, elapsed_ns: int) -> None:
        key = (code, response_code)
        hist = self.table.get(key)
        if hist is None:
            hist = self.table[key] = Histogram(RPC_LATENCY_MS_BOUNDS)
        ms = elapsed_ns / 1e6
        hist.counts[bisect_left(RPC_LATENCY_MS_BOUNDS, ms)] += 1
        hist.sum += ms

    def failed(self, code: int, exc: BaseException, elapsed_ns: int) -> None:
        """Request ``code`` raised ``exc``: its wire code (SYSTEM_ERROR for anything but a
        RocketqError), as the connection answers it."""
        if isinstance(exc, RocketqError):
            self.record(code, int(exc.code), elapsed_ns)
        elif isinstance(exc, Exception):
            self.record(code, ResponseCode.SYSTEM_ERROR, elapsed_ns)

    def instrument(
        self,
        handlers: dict[int, Any],
        immediate: dict[int, ImmediateHandler] | None = None,
    ) -> None:
        """Wrap, in place, every handler of ``handlers`` (``code → async handler``) and of
        ``immediate`` (``code → immediate handler``)."""
        for code, handler in list(handlers.items()):
            handlers[code] = self._timed(code, handler)
        for code, now in list((immediate or {}).items()):
            immediate[code] = self._timed_now(code, now)  # type: ignore[index]

    def _timed(self, code: int, handler: RequestHandler) -> RequestHandler:
        record = self.record
        clock = time.perf_counter_ns

        @functools.wraps(handler)
        async def timed(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
            began = clock()
            try:
                response = await handler(conn, request)
            except RocketqError as exc:
                record(code, int(exc.code), clock() - began)
                raise
            except Exception:
                record(code, ResponseCode.SYSTEM_ERROR, clock() - began)
                raise
            if response is not None:
                record(code, response.code, clock() - began)
            return response

        return timed

    def _timed_now(self, code: int, handler: ImmediateHandler) -> ImmediateHandler:
        # A SUCCESS answer's elapsed time is appended to ``ok`` and folded by the batch (fold()).
        record = self.record
        clock = time.perf_counter_ns
        ok = self.ok[code]

        @functools.wraps(handler)
        def timed_now(conn: Connection, request: RemotingCommand) -> RemotingCommand | bytes | None:
            began = clock()
            try:
                response = handler(conn, request)
            except RocketqError as exc:
                record(code, int(exc.code), clock() - began)
                raise
            if response.__class__ is bytes:  # the pre-encoded SUCCESS answer of a send
                ok.append(clock() - began)
                return response
            if response is not None:
                record(code, response.code, clock() - began)  # type: ignore[union-attr]
            return response

        return timed_now

    def _success(self, code: int) -> Histogram:
        key = (code, int(ResponseCode.SUCCESS))
        hist = self.table.get(key)
        if hist is None:
            hist = self.table[key] = Histogram(RPC_LATENCY_MS_BOUNDS)
        return hist

    def _fold(self, code: int, elapsed: list[int]) -> None:
        hist = self._success(code)
        # a value of ns nanoseconds is at most b ms exactly when ns <= b * 10**6
        add_to_buckets(hist.counts, 0, _BOUNDS_NS, elapsed)
        hist.sum += sum(elapsed) / 1e6

    def fold(self) -> None:
        """Fold every pending SUCCESS latency into its histogram (on the loop: the broker every
        second and before every scrape), by whole-list operations; and what the compiled timer
        counted since the last fold."""
        for code, elapsed in list(self.ok.items()):
            if elapsed:
                self._fold(code, elapsed)
                elapsed.clear()  # the same list: the name server's wrappers hold it
        if self._timer is not None:
            for code, counts, total_ns in self._timer.drain():
                hist = self._success(code)
                into = hist.counts
                for i, n in enumerate(counts):
                    into[i] += n
                hist.sum += total_ns / 1e6

    def family(self, base: Labels) -> Family:
        """``rocketmq_rpc_latency`` with the labels ``base`` + protocol, request and response code."""
        self.fold()
        fam = Family(
            "rocketmq_rpc_latency", HISTOGRAM, "Time from a request's decoding to its answer (milliseconds)."
        )
        for (code, response_code), hist in sorted(self.table.items()):
            copy = Histogram(hist.bounds)
            copy.counts = list(hist.counts)
            copy.sum = hist.sum
            fam.add(
                (
                    *base,
                    ("protocol_type", "remoting"),
                    ("request_code", code_name(code)),
                    ("response_code", code_name(response_code, _RESPONSE_NAMES)),
                ),
                copy,
            )
        return fam


__all__ = ["RPC_LATENCY_MS_BOUNDS", "PendingOk", "RpcLatency", "TimedCall", "code_name"]

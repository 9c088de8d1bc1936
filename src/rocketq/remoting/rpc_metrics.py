"""``rocketmq_rpc_latency``: the time a remoting server takes per request, by request and
response code (RocketMQ 5's ``RemotingMetricsManager``), shared by the broker and the name server.

Every request is timed (``_count`` is the number of requests): ``perf_counter_ns`` read before
the handler and after its answer, the elapsed milliseconds added to the histogram of the
(request code, response code) pair, no lock (every handler runs on the server's event loop
thread). With metrics off nothing is timed and a request pays nothing.

Two ways in. The broker times its requests inline in its own dispatch methods
(``Broker._handle_now`` and ``Broker._handle``: no extra call frame per request); the name
server's handler tables are wrapped once at start, :meth:`RpcLatency.instrument` (a wrapper's
``__wrapped__`` is the handler it times). On the hottest path, an immediate handler's SUCCESS
(the pre-encoded answer of a send), the elapsed time is only appended to its request code's
list in :attr:`RpcLatency.ok`, and folded into the histogram by
the batch (:meth:`RpcLatency.fold`, which the broker calls every second and before every
scrape): in the middle of a send each extra lookup costs several times what it costs in a
tight loop. The latency of a request answered inside ``data_received`` (the immediate table)
is recorded there; one the immediate handler passes on is recorded by the task path instead,
never twice. A held pull's latency includes its hold (RocketMQ labels those
``is_long_polling``; rocketq tells them by their response code, ``pull_not_found`` after a
hold that found nothing).

Label values are RocketMQ's: the code's constant name in lower case (``send_message_v2``,
``success``), the number for a code without a name.
"""

from __future__ import annotations

import functools
import time
from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

from rocketq.errors import ResponseCode, RocketqError
from rocketq.metrics.exposition import HISTOGRAM, Family, Histogram, Labels, add_to_buckets
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import Connection, ImmediateHandler, RequestHandler

#: RocketMQ's ``rpc_latency`` buckets (milliseconds).
RPC_LATENCY_MS_BOUNDS = (1, 3, 5, 10, 100, 1000, 3000)

#: The bounds in nanoseconds, the unit a request is timed in (folding compares the integers).
_BOUNDS_NS = tuple(ms * 1_000_000 for ms in RPC_LATENCY_MS_BOUNDS)

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


class RpcLatency:
    """Latency histograms (milliseconds) by (request code, response code)."""

    def __init__(self) -> None:
        self.table: dict[tuple[int, int], Histogram] = {}
        #: SUCCESS answers of immediate handlers not yet folded: per request code, the
        #: elapsed nanoseconds (one int appended per send, no tuple).
        self.ok = PendingOk()

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

    def _fold(self, code: int, elapsed: list[int]) -> None:
        key = (code, int(ResponseCode.SUCCESS))
        hist = self.table.get(key)
        if hist is None:
            hist = self.table[key] = Histogram(RPC_LATENCY_MS_BOUNDS)
        # a value of ns nanoseconds is at most b ms exactly when ns <= b * 10**6
        add_to_buckets(hist.counts, 0, _BOUNDS_NS, elapsed)
        hist.sum += sum(elapsed) / 1e6

    def fold(self) -> None:
        """Fold every pending SUCCESS latency into its histogram (on the loop: the broker every
        second and before every scrape), by whole-list operations."""
        for code, elapsed in list(self.ok.items()):
            if elapsed:
                self._fold(code, elapsed)
                elapsed.clear()  # the same list: the broker's dispatch may hold it

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


__all__ = ["RPC_LATENCY_MS_BOUNDS", "PendingOk", "RpcLatency", "code_name"]

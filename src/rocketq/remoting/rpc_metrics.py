"""``rocketmq_rpc_latency``: the time a remoting server takes per request, by request and
response code (RocketMQ 5's ``RemotingMetricsManager``), shared by the broker and the name server.

:meth:`RpcLatency.instrument` wraps the handlers of a server's dispatch tables once, when
metrics are on; with metrics off nothing is wrapped and a request pays nothing (a wrapper's
``__wrapped__`` is the handler it times). A wrapped handler reads ``perf_counter_ns`` before and
after and adds one to the bucket of the elapsed time, and the time to the sum, in a list of
plain ints per (request code, response code), no lock (every handler runs on the server's event
loop thread). Every request is timed and counted: ``_count`` is the number of requests. The
bounds are kept in nanoseconds, so a request below the first bound (nearly every send) finds its
bucket with one comparison; the immediate handler of a code holds its SUCCESS counts itself, so
the hottest path (a send answered at once) looks nothing up. The latency of a
request answered inside ``data_received`` (the immediate table) is recorded there; one the
immediate handler passes on is recorded by the task path instead, never twice. A held pull's
latency includes its hold (RocketMQ labels those ``is_long_polling``; rocketq tells them by
their response code, ``pull_not_found`` after a hold that found nothing).

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
from rocketq.metrics.exposition import HISTOGRAM, Family, Histogram, Labels
from rocketq.remoting.codes import RequestCode
from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import Connection, ImmediateHandler, RequestHandler

#: RocketMQ's ``rpc_latency`` buckets (milliseconds).
RPC_LATENCY_MS_BOUNDS = (1, 3, 5, 10, 100, 1000, 3000)

_REQUEST_NAMES = {int(c): c.name.lower() for c in RequestCode}
_RESPONSE_NAMES = {int(c): c.name.lower() for c in ResponseCode}


def code_name(code: int, names: Mapping[int, str] = _REQUEST_NAMES) -> str:
    """The label value of a request code (response codes: pass ``response_names()``)."""
    return names.get(code) or str(code)


#: The bounds in nanoseconds, the unit a request is timed in: its bucket is found without a
#: float division (``v`` ns ≤ ``b`` ms exactly when ``v`` ≤ ``b``·10⁶).
_BOUNDS_NS = tuple(ms * 1_000_000 for ms in RPC_LATENCY_MS_BOUNDS)
_FIRST_NS = _BOUNDS_NS[0]
#: Index of the sum (nanoseconds) in a slot, after the per-bucket counts (+Inf last).
_SUM = len(_BOUNDS_NS) + 1


class RpcLatency:
    """Latency histograms (milliseconds) by (request code, response code)."""

    def __init__(self) -> None:
        #: (request code, response code) → [per-bucket counts (+Inf last)…, sum of nanoseconds]
        self.table: dict[tuple[int, int], list[int]] = {}

    def slot(self, code: int, response_code: int) -> list[int]:
        """The counts of (``code``, ``response_code``), created empty on first use."""
        key = (code, response_code)
        counts = self.table.get(key)
        if counts is None:
            counts = self.table[key] = [0] * (_SUM + 1)
        return counts

    def record(self, code: int, response_code: int, elapsed_ns: int) -> None:
        counts = self.slot(code, response_code)
        counts[0 if elapsed_ns <= _FIRST_NS else bisect_left(_BOUNDS_NS, elapsed_ns)] += 1
        counts[_SUM] += elapsed_ns

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
        # The hottest wrapper (every send under ASYNC_FLUSH): a SUCCESS answer adds to the
        # counts of its code held by this closure, no lookup, and in the common case (at most
        # the first bound) no search of the bounds either.
        record = self.record
        clock = time.perf_counter_ns
        ok = self.slot(code, int(ResponseCode.SUCCESS))
        bounds, first, total = _BOUNDS_NS, _FIRST_NS, _SUM

        @functools.wraps(handler)
        def timed_now(conn: Connection, request: RemotingCommand) -> RemotingCommand | bytes | None:
            began = clock()
            try:
                response = handler(conn, request)
            except RocketqError as exc:
                record(code, int(exc.code), clock() - began)
                raise
            if response.__class__ is bytes:  # the pre-encoded SUCCESS answer of a send
                elapsed = clock() - began
                ok[0 if elapsed <= first else bisect_left(bounds, elapsed)] += 1
                ok[total] += elapsed
                return response
            if response is not None:
                record(code, response.code, clock() - began)  # type: ignore[union-attr]
            return response

        return timed_now

    def family(self, base: Labels) -> Family:
        """``rocketmq_rpc_latency`` with the labels ``base`` + protocol, request and response code
        (the pairs with at least one request)."""
        fam = Family(
            "rocketmq_rpc_latency", HISTOGRAM, "Time from a request's decoding to its answer (milliseconds)."
        )
        for (code, response_code), slot in sorted(self.table.items()):
            counts = slot[:_SUM]
            if not any(counts):
                continue
            hist = Histogram(RPC_LATENCY_MS_BOUNDS)
            hist.counts = counts
            hist.sum = slot[_SUM] / 1e6
            fam.add(
                (
                    *base,
                    ("protocol_type", "remoting"),
                    ("request_code", code_name(code)),
                    ("response_code", code_name(response_code, _RESPONSE_NAMES)),
                ),
                hist,
            )
        return fam


__all__ = ["RPC_LATENCY_MS_BOUNDS", "RpcLatency", "code_name"]

"""Requests answered after ``data_received`` returned, without a task: the sends of a DLedger
leader, which the immediate handler hands to the replicated log and answers from the put's
completion (:data:`~rocketq.remoting.connection.DEFERRED`, ``Connection.answer``).

:class:`DeferredAnswers` counts them, so that shutdown waits for their answers before it closes
the servers (as it waits for running request tasks), and times them for
``rocketmq_rpc_latency`` from the handler's start to the answer, as the task path times a
request: a SUCCESS frame goes to the pending list of its code (``RpcLatency.ok``), any other
answer to its response code, an exception to its wire code.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from rocketq.remoting.command import RemotingCommand
from rocketq.remoting.connection import Connection

if TYPE_CHECKING:
    from rocketq.remoting.rpc_metrics import RpcLatency

_perf_ns = time.perf_counter_ns


class DeferredAnswers:
    """See the module docstring. One per broker (``BrokerContext.deferred``), on its loop."""

    def __init__(self) -> None:
        #: requests taken and not answered yet
        self.pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        #: the request latencies (set by the broker with metrics on; None: nothing is timed)
        self.rpc: RpcLatency | None = None

    def begin(self) -> int:
        """A request is taken, to be answered by :meth:`answer`; returns its start time for
        :meth:`answer` (0 when nothing is timed)."""
        self.pending += 1
        if self.pending == 1:
            self._idle.clear()
        return _perf_ns() if self.rpc is not None else 0

    def dropped(self) -> None:
        """A request :meth:`begin` counted is not taken after all (it is answered at once)."""
        self.pending -= 1
        if not self.pending:
            self._idle.set()

    def answer(
        self,
        conn: Connection,
        request: RemotingCommand,
        response: RemotingCommand | bytes | Exception,
        began: int,
    ) -> None:
        """Answer ``request`` (taken at ``began``, :meth:`begin`) on ``conn``."""
        try:
            rpc = self.rpc
            if rpc is not None and began:
                elapsed = _perf_ns() - began
                if isinstance(response, bytes):  # the encoded SUCCESS answer of a send
                    rpc.ok[request.code].append(elapsed)
                elif isinstance(response, RemotingCommand):
                    rpc.record(request.code, response.code, elapsed)
                else:
                    rpc.failed(request.code, response, elapsed)
            conn.answer(request, response)
        finally:
            self.pending -= 1
            if not self.pending:
                self._idle.set()

    def answered(self, count: int) -> None:
        """``count`` requests :meth:`begin` counted were answered by their connections directly
        (``Connection.answer_frames``), untimed."""
        self.pending -= count
        if not self.pending:
            self._idle.set()

    async def drained(self) -> None:
        """Return once every taken request is answered."""
        await self._idle.wait()


__all__ = ["DeferredAnswers"]

"""The store's put latency sample (``rocketq_store_put_latency_seconds``): one put in
:data:`PUT_LATENCY_SAMPLE` timed, per calling thread, while the broker counts metrics.

Every put asks ``next()`` of an iterator for its start: 0 (not timed) PUT_LATENCY_SAMPLE - 1
times, then the clock once, over and over (:func:`put_samples`); with metrics off the iterator
gives 0 forever, so a put never tests whether metrics are on. A timed put's seconds go into the
calling thread's histogram (:class:`~rocketq.metrics.exposition.ThreadHistograms`), in C when
the accelerator is in use (``rocketq._speedups.PutSampler.observe``), else in
:meth:`PutLatencySampling._put_timed`.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import time
from collections.abc import Callable, Iterator

from rocketq import speedups
from rocketq.metrics.exposition import ThreadHistograms

PUT_LATENCY_SAMPLE = 16
_perf_ns = time.perf_counter_ns
_bisect_left = bisect.bisect_left


def put_samples(compiled: bool | None = None, histograms: ThreadHistograms | None = None) -> Iterator[int]:
    """What each put's ``next()`` gives: 0 (not timed) PUT_LATENCY_SAMPLE - 1 times, then the
    clock (``perf_counter_ns``) once, over and over: the 1-in-PUT_LATENCY_SAMPLE sample without
    a counter, a modulo or an int allocated per put. Compiled (``rocketq._speedups.PutSampler``,
    whose ``observe(began)`` adds a timed put to ``histograms`` as MessageStore._put_timed
    does) when the C accelerator is in use (``compiled``: see
    :func:`rocketq.speedups.module_for`), else still all in C: a cycle of ``int`` (``int()`` is
    0) and the clock, each called."""
    module = speedups.module_for(compiled)
    if module is not None:
        sampler: Iterator[int] = module.PutSampler(PUT_LATENCY_SAMPLE, histograms)
        return sampler
    clocks: tuple[Callable[[], int], ...] = (int,) * (PUT_LATENCY_SAMPLE - 1) + (_perf_ns,)
    return map(operator.call, itertools.cycle(clocks))


class PutLatencySampling:
    """The sampling state of a store (a mixin of :class:`~rocketq.store.message_store.MessageStore`)."""

    def __init__(self) -> None:
        self._put_latency: ThreadHistograms | None = None
        #: What each put's next() gives: always 0 without put_latency, else put_samples().
        self._put_samples: Iterator[int] = itertools.repeat(0)
        #: The compiled sampler's observe, which adds a timed put to put_latency as _put_timed
        #: does (None: _put_timed; a bound method here would make the store a reference cycle).
        self._put_observe: Callable[[int], object] | None = None

    @property
    def put_latency(self) -> ThreadHistograms | None:
        """Seconds a put_message / put_messages call takes (the flush wait under SYNC_FLUSH
        included), one put in PUT_LATENCY_SAMPLE timed, per calling thread; None (the default)
        measures nothing. Set by the broker when it serves metrics."""
        return self._put_latency

    @put_latency.setter
    def put_latency(self, histograms: ThreadHistograms | None) -> None:
        self._put_latency = histograms
        # a put asks next() either way: no test of put_latency per put, on or off
        self._put_samples = itertools.repeat(0) if histograms is None else put_samples(None, histograms)
        self._put_observe = getattr(self._put_samples, "observe", None)  # the compiled sampler's
        lane = getattr(self, "_lane", None)  # the store's compiled single put: it never samples
        if lane is not None:
            lane.timed = histograms is not None

    def _put_timed(self, began: int) -> None:
        observe = self._put_observe
        if observe is not None:
            observe(began)
            return
        timed = self._put_latency
        if timed is None:
            return
        hist = timed.local()
        seconds = (_perf_ns() - began) / 1e9
        hist.counts[_bisect_left(hist.bounds, seconds)] += 1
        hist.sum += seconds


__all__ = ["PUT_LATENCY_SAMPLE", "PutLatencySampling", "put_samples"]

"""The Prometheus text exposition format (version 0.0.4), written by hand, and the histogram
accumulator the servers count into.

One idea: what a scrape answers. A :class:`Family` is one metric (name, type, help) and its
samples; :func:`render` writes families as the text format::

    # HELP rocketmq_messages_in_total Messages stored by sends.
    # TYPE rocketmq_messages_in_total counter
    rocketmq_messages_in_total{cluster="DefaultCluster",node_id="broker-a",topic="T"} 42
    # HELP rocketmq_message_size Size of stored messages (bytes).
    # TYPE rocketmq_message_size histogram
    rocketmq_message_size_bucket{topic="T",le="1024.0"} 40
    rocketmq_message_size_bucket{topic="T",le="+Inf"} 42
    rocketmq_message_size_sum{topic="T"} 9000
    rocketmq_message_size_count{topic="T"} 42

Rules kept (``promtool check metrics`` checks them): every family's samples follow its one
``# TYPE`` line (families of one name from several collectors are merged, so a process that
serves a name server and a broker answers each name once); label values escape ``\\``, ``"``
and newlines; histogram buckets are cumulative, ascending, end with ``le="+Inf"`` equal to
``_count``. Counter names end in ``_total`` where RocketMQ's do.

:class:`Histogram` keeps per-bucket (not cumulative) counts and a sum in plain ints: an
observation is one ``bisect`` and two additions, no lock. Each histogram is written by one
thread only (the event loop, or one service thread); the scrape reads the ints as they are, so
a sample may miss the observation being made at that instant, never more.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

#: ``Content-Type`` of the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"
_KINDS = (COUNTER, GAUGE, HISTOGRAM)

Labels = tuple[tuple[str, str], ...]


def add_to_buckets(counts: list[int], at: int, bounds: Sequence[int], values: Sequence[int]) -> None:
    """Add ``values`` to the per-bucket counts ``counts[at:]`` of a histogram with upper bounds
    ``bounds`` (inclusive; +Inf last): what ``counts[at + bisect_left(bounds, v)] += 1`` for
    each value does, by a sort and one bisection per bound."""
    if not values:
        return
    if max(values) <= bounds[0]:
        counts[at] += len(values)
        return
    ordered = sorted(values)
    below = 0
    for i, bound in enumerate(bounds):
        upto = bisect_right(ordered, bound)
        counts[at + i] += upto - below
        below = upto
    counts[at + len(bounds)] += len(ordered) - below


class Histogram:
    """Counts of observations per bucket (``counts[i]``: at most ``bounds[i]`` and above the
    bound before; the last slot is above every bound) and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram bounds must ascend without repeats: {list(bounds)}")
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum: float = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def merged(self, other: Histogram) -> Histogram:
        """A new histogram with the observations of both (same bounds)."""
        if other.bounds != self.bounds:
            raise ValueError("cannot merge histograms of different bounds")
        out = Histogram(self.bounds)
        out.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        out.sum = self.sum + other.sum
        return out


class ThreadHistograms:
    """One :class:`Histogram` per writing thread, for observations made by several threads (a
    store put runs on the event loop or in worker threads): each thread adds to its own, so no
    addition is lost and none takes a lock; :meth:`merged` sums them at scrape time."""

    __slots__ = ("_by_thread", "bounds")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(Histogram(bounds).bounds)
        self._by_thread: dict[int, Histogram] = {}

    def local(self) -> Histogram:
        """The calling thread's histogram."""
        ident = threading.get_ident()
        hist = self._by_thread.get(ident)
        if hist is None:
            hist = self._by_thread[ident] = Histogram(self.bounds)
        return hist

    def merged(self) -> Histogram:
        out = Histogram(self.bounds)
        for hist in list(self._by_thread.values()):
            out = out.merged(hist)
        return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Family:
    """One metric: its name, type (counter, gauge, histogram), help text and samples."""

    __slots__ = ("help", "kind", "name", "samples")

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        if kind not in _KINDS:
            raise ValueError(f"metric type {kind!r} is not one of {_KINDS}")
        self.name = name
        self.kind = kind
        self.help = help_text
        #: (labels, value) for counters and gauges; (labels, histogram) for histograms.
        self.samples: list[tuple[Labels, float | Histogram]] = []

    def add(self, labels: Mapping[str, str] | Labels, value: float | Histogram) -> Family:
        items = tuple(labels.items()) if isinstance(labels, Mapping) else labels
        if self.kind == HISTOGRAM:
            if not isinstance(value, Histogram):
                raise TypeError(f"{self.name} is a histogram: add a Histogram, not {value!r}")
        elif isinstance(value, Histogram):
            raise TypeError(f"{self.name} is a {self.kind}: add a number, not a Histogram")
        self.samples.append((items, value))
        return self

    def _lines(self, out: list[str]) -> None:
        name = self.name
        if self.kind != HISTOGRAM:
            for labels, value in self.samples:
                assert not isinstance(value, Histogram)
                out.append(f"{name}{_labels(labels)} {_number(value)}")
            return
        for labels, hist in self.samples:
            assert isinstance(hist, Histogram)
            running = 0
            for bound, n in zip(hist.bounds, hist.counts, strict=False):
                running += n
                out.append(f"{name}_bucket{_labels(labels, _le(bound))} {running}")
            running += hist.counts[-1]
            out.append(f"{name}_bucket{_labels(labels, _LE_INF)} {running}")
            out.append(f"{name}_sum{_labels(labels)} {_number(hist.sum)}")
            out.append(f"{name}_count{_labels(labels)} {running}")


_LE_INF = 'le="+Inf"'


def _le(bound: float) -> str:
    return 'le="' + repr(float(bound)) + '"'


def render(families: Iterable[Family]) -> str:
    """The text exposition of ``families``: families of one name merged (their types must
    agree; the first help text is kept), in the order names first appear."""
    merged: dict[str, Family] = {}
    for fam in families:
        have = merged.get(fam.name)
        if have is None:
            have = merged[fam.name] = Family(fam.name, fam.kind, fam.help)
        elif have.kind != fam.kind:
            raise ValueError(f"metric {fam.name} is both a {have.kind} and a {fam.kind}")
        have.samples.extend(fam.samples)
    out: list[str] = []
    for fam in merged.values():
        out.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        out.append(f"# TYPE {fam.name} {fam.kind}")
        fam._lines(out)
    return "\n".join(out) + "\n" if out else ""


__all__ = [
    "CONTENT_TYPE",
    "COUNTER",
    "GAUGE",
    "HISTOGRAM",
    "Family",
    "Histogram",
    "Labels",
    "ThreadHistograms",
    "add_to_buckets",
    "render",
]

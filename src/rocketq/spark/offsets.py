"""Queue offsets for the ``rocketq`` Spark data source: JSON forms, resolution, rate limits.

Pure functions only (no network, no pyspark), so the rules are unit-tested on their own.

A queue is named by ``QueueRef(topic, broker, queue_id)``. Offsets travel as JSON nested by
topic, then broker name, then queue id (a string, as JSON keys must be)::

    {"Orders": {"broker-a": {"0": 12, "1": -2}, "broker-b": {"0": -1}}}

    -2  earliest (the queue's min offset)       -1  latest (the queue's max offset)
    n   that queue offset (the next message to read; ``end`` offsets are exclusive)

The same form is what Structured Streaming stores in ``<checkpoint>/offsets/N``; there every
value is a concrete offset (never -1/-2).

Rules kept here:

* ``resolve_offset``: -2 → min, -1 → max, anything else as given; a concrete offset outside
  ``[min, max]`` is clamped (below min is a data-loss case decided by ``check_data_loss``).
* ``rate_limit``: ``maxOffsetsPerTrigger`` is split across queues in proportion to what each has
  available (largest remainders get the leftover rows), so the batch holds exactly
  ``min(max_rows, available)`` offsets and no queue goes past its latest offset.
* ``split_range``: a queue's range cut into near-equal contiguous pieces for ``minPartitions``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from rocketq.errors import ConfigError, RocketqError

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1


class QueueRef(NamedTuple):
    """One message queue: topic, broker name and queue id (sorts in that order)."""

    topic: str
    broker: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker}/{self.queue_id}"


class DataLossError(RocketqError):
    """Messages a query still needed are gone (retention deleted them) and ``failOnDataLoss``
    is true."""


#: ``startingOffsets`` / ``endingOffsets`` after parsing: ``"earliest"``, ``"latest"`` or per queue.
OffsetSpec = str | dict[QueueRef, int]


def offsets_to_json(offsets: Mapping[QueueRef, int]) -> dict[str, dict[str, dict[str, int]]]:
    """The nested JSON document (topic → broker → queue id → offset), keys sorted."""
    doc: dict[str, dict[str, dict[str, int]]] = {}
    for ref in sorted(offsets):
        doc.setdefault(ref.topic, {}).setdefault(ref.broker, {})[str(ref.queue_id)] = int(offsets[ref])
    return doc


def offsets_from_json(doc: object, *, what: str = "offsets") -> dict[QueueRef, int]:
    """Parse the nested form (a dict, or its JSON text); ConfigError names the bad part."""
    if isinstance(doc, str | bytes):
        try:
            doc = json.loads(doc)
        except ValueError as exc:
            raise ConfigError(f"{what} is neither earliest/latest nor JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f'{what} must be a JSON object {{"topic": {{"broker": {{"0": offset}}}}}}')
    out: dict[QueueRef, int] = {}
    for topic, brokers in doc.items():
        if not isinstance(brokers, dict):
            raise ConfigError(f"{what}: topic {topic!r} must map broker names to objects")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise ConfigError(f"{what}: {topic}/{broker} must map queue ids to offsets")
            for qid, offset in queues.items():
                if not str(qid).isdigit():
                    raise ConfigError(f"{what}: queue id {qid!r} of {topic}/{broker} is not a number")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                    raise ConfigError(
                        f"{what}: offset {offset!r} of {topic}/{broker}/{qid} must be an integer >= -2"
                    )
                out[QueueRef(str(topic), str(broker), int(qid))] = offset
    return out


def parse_offset_spec(text: str, *, what: str, allow_earliest: bool = True) -> OffsetSpec:
    """``earliest`` | ``latest`` | nested JSON. ``allow_earliest=False`` (ending offsets) rejects
    ``earliest`` and -2, as an end at the start of a queue reads nothing by construction."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        if word == "earliest" and not allow_earliest:
            raise ConfigError(f"{what} cannot be 'earliest'; use 'latest' or per-queue JSON")
        return word
    offsets = offsets_from_json(text, what=what)
    if not allow_earliest:
        bad = [str(ref) for ref, off in offsets.items() if off == EARLIEST]
        if bad:
            raise ConfigError(f"{what} cannot use -2 (earliest): {', '.join(bad)}")
    return offsets


def resolve_offset(spec_offset: int, low: int, high: int) -> int:
    """-2 → ``low``, -1 → ``high``, otherwise the offset clamped to ``[low, high]``."""
    if spec_offset == EARLIEST:
        return low
    if spec_offset == LATEST:
        return high
    return min(max(spec_offset, low), high)


def spec_offset_for(spec: OffsetSpec, ref: QueueRef, default: int) -> int:
    """The -2/-1/n offset a spec gives ``ref`` (``default`` for queues a JSON spec omits)."""
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    return spec.get(ref, default)


@dataclass(frozen=True, slots=True)
class LossDecision:
    """Where to start reading a queue after comparing the needed start with its min offset."""

    start: int
    lost: int  # offsets skipped because retention removed them


def check_data_loss(
    ref: QueueRef, needed: int, min_offset: int, *, fail_on_data_loss: bool, end: int | None = None
) -> LossDecision:
    """Decide what happens when ``needed`` (the next offset the query must read) is below the
    queue's ``min_offset``: raise DataLossError (``fail_on_data_loss``) or skip to ``min_offset``
    with a warning. ``end`` bounds what counts as lost (a range wholly below min loses all of it)."""
    if needed >= min_offset:
        return LossDecision(needed, 0)
    upto = min_offset if end is None else min(min_offset, end)
    lost = max(0, upto - needed)
    message = (
        f"topic {ref.topic}, broker {ref.broker}, queue {ref.queue_id} ({ref}): offsets "
        f"[{needed}, {upto}) are no longer on the broker (its min offset is {min_offset}); "
        f"retention deleted {lost} messages the query had not read"
    )
    if fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip them with a warning")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return LossDecision(upto, lost)


def rate_limit(
    start: Mapping[QueueRef, int], latest: Mapping[QueueRef, int], max_rows: int
) -> dict[QueueRef, int]:
    """End offsets that admit at most ``max_rows`` offsets in total, split in proportion to each
    queue's backlog ``latest - start``. Queues missing from ``start`` start at 0."""
    if max_rows < 0:
        raise ValueError(f"max_rows={max_rows} must be >= 0")
    backlog = {ref: max(0, latest[ref] - start.get(ref, 0)) for ref in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return {ref: max(latest[ref], start.get(ref, 0)) for ref in latest}
    share: dict[QueueRef, int] = {}
    remainders: list[tuple[int, QueueRef]] = []
    for ref in sorted(backlog):
        whole, rest = divmod(backlog[ref] * max_rows, total)
        share[ref] = whole
        remainders.append((-rest, ref))
    leftover = max_rows - sum(share.values())
    for _, ref in sorted(remainders):
        if leftover <= 0:
            break
        if share[ref] < backlog[ref]:
            share[ref] += 1
            leftover -= 1
    return {ref: start.get(ref, 0) + share[ref] for ref in latest}


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` as ``parts`` contiguous near-equal ranges (fewer when it is shorter)."""
    if end <= start:
        return []
    parts = max(1, min(parts, end - start))
    size, extra = divmod(end - start, parts)
    out: list[tuple[int, int]] = []
    pos = start
    for i in range(parts):
        step = size + (1 if i < extra else 0)
        out.append((pos, pos + step))
        pos += step
    return out


def pieces_per_queue(lengths: Mapping[QueueRef, int], min_partitions: int) -> dict[QueueRef, int]:
    """How many Spark partitions each queue's range becomes so that there are at least
    ``min_partitions`` in all (long queues are split more), one per non-empty queue otherwise."""
    nonempty = {ref: n for ref, n in lengths.items() if n > 0}
    if not nonempty:
        return {}
    if min_partitions <= len(nonempty):
        return dict.fromkeys(nonempty, 1)
    total = sum(nonempty.values())
    out = {ref: max(1, min(n, round(n * min_partitions / total))) for ref, n in nonempty.items()}
    # rounding can fall short of the target; give the extra pieces to the longest queues
    for ref in sorted(nonempty, key=lambda r: (-nonempty[r], r)):
        if sum(out.values()) >= min_partitions:
            break
        if out[ref] < nonempty[ref]:
            out[ref] += 1
    return out


def parse_tag_expression(expression: str | None) -> frozenset[str] | None:
    """RocketMQ's TAG expression: ``*`` (or empty) → None (every message), else the tags of
    ``"TagA || TagB"``."""
    if expression is None or expression.strip() in ("", "*"):
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    if not tags:
        raise ConfigError(f"subExpression {expression!r} names no tag")
    return tags


def next_end(
    start: dict[QueueRef, int],
    latest: dict[QueueRef, int],
    min_offsets: dict[QueueRef, int],
    *,
    max_rows: int | None,
    target: dict[QueueRef, int] | None,
) -> dict[QueueRef, int]:
    """The end offsets of the next batch (pure; see the module rules)."""
    if target is not None:
        latest = {ref: min(off, target[ref]) for ref, off in latest.items() if ref in target}
    # new queues count their backlog from their earliest message
    base = {ref: start.get(ref, min_offsets.get(ref, 0)) for ref in latest}
    if max_rows is not None:
        ends = rate_limit(base, latest, max_rows)
    else:
        ends = {ref: max(latest[ref], base[ref]) for ref in latest}
    out = dict(start)
    for ref, end in ends.items():
        out[ref] = max(end, start.get(ref, 0))
    return out


def plan_stream_ranges(
    start: dict[QueueRef, int],
    end: dict[QueueRef, int],
    min_offsets: dict[QueueRef, int],
    *,
    fail_on_data_loss: bool,
) -> dict[QueueRef, tuple[int, int]]:
    """The ``[from, to)`` range of every queue with something to read between two offsets."""
    ranges: dict[QueueRef, tuple[int, int]] = {}
    for ref, to in sorted(end.items()):
        low = min_offsets.get(ref, 0)
        if ref in start:
            frm = check_data_loss(ref, start[ref], low, fail_on_data_loss=fail_on_data_loss, end=to).start
        else:
            frm = max(0, low)
        if frm < to:
            ranges[ref] = (frm, to)
    return ranges


__all__ = [
    "EARLIEST",
    "LATEST",
    "DataLossError",
    "LossDecision",
    "OffsetSpec",
    "QueueRef",
    "check_data_loss",
    "next_end",
    "offsets_from_json",
    "offsets_to_json",
    "parse_offset_spec",
    "parse_tag_expression",
    "pieces_per_queue",
    "plan_stream_ranges",
    "rate_limit",
    "resolve_offset",
    "spec_offset_for",
    "split_range",
]

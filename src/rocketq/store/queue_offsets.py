"""The queue-offset table: the next queue offset of every (topic, queue id).

The CommitLog assigns queue offsets under its put lock from this table (one consecutive run per
queue), advancing a queue's entry only for a record it wrote (the DLedger CommitLog: for an
entry placed in the log; one encoded and not placed gives its offset back at once); recovery
rebuilds it from the ConsumeQueues and the re-verified CommitLog tail (in DLedger mode past
each queue's last message, at open and, by the store itself, once for each term a member leads:
:mod:`rocketq.store.dledger_lead`), and a ConsumeQueue rebuild raises it, under the put lock, so
no queue offset is given out twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping


class QueueOffsetTable(MutableMapping[tuple[str, int], int]):
    """The next queue offset of every (topic, queue id): RocketMQ's ``topicQueueTable``.

    A mapping keyed ``(topic, queue_id)`` for everyone else; underneath, one small dict per topic
    keyed by queue id, which the put path reaches through its per-topic cache. That saves the
    put a key tuple, its hash and a probe of a table of every queue on the broker. The per-topic
    dicts are never replaced, only emptied (:meth:`clear`), so references the cache holds stay
    valid.
    """

    __slots__ = ("_topics",)

    def __init__(self) -> None:
        self._topics: dict[str, dict[int, int]] = {}

    def of_topic(self, topic: str) -> dict[int, int]:
        """The live queue id → next offset dict of ``topic`` (created empty). ``setdefault`` is
        atomic, so writers meeting a new topic at once all get the same dict."""
        d = self._topics.get(topic)
        if d is None:
            d = self._topics.setdefault(topic, {})
        return d

    def __getitem__(self, key: tuple[str, int]) -> int:
        d = self._topics.get(key[0])
        if d is None:
            raise KeyError(key)
        try:
            return d[key[1]]
        except KeyError:
            raise KeyError(key) from None

    def __setitem__(self, key: tuple[str, int], value: int) -> None:
        self.of_topic(key[0])[key[1]] = value

    def __delitem__(self, key: tuple[str, int]) -> None:
        d = self._topics.get(key[0])
        if d is None or key[1] not in d:
            raise KeyError(key)
        del d[key[1]]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for topic, d in list(self._topics.items()):
            for qid in list(d):
                yield (topic, qid)

    def __len__(self) -> int:
        return sum(len(d) for d in self._topics.values())

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        d = self._topics.get(key[0])
        return d is not None and key[1] in d

    def clear(self) -> None:
        for d in self._topics.values():
            d.clear()

    def replace(self, nexts: Mapping[tuple[str, int], int]) -> None:
        """The table becomes ``nexts`` (a rebuild: recovery, a new leader's term), in place;
        the caller holds the put lock where puts may run."""
        self.clear()
        self.update(nexts)

    def __repr__(self) -> str:
        return f"QueueOffsetTable({dict(self.items())!r})"

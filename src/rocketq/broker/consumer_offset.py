"""Committed consumer offsets per (topic, group, queue), ``config/consumerOffset.json``.

File shape, as fastjson writes it (integer queue ids as **unquoted** keys, tab indentation)::

    {
        "dataVersion":{"counter":7,"stateVersion":0,"timestamp":1700000000000},
        "offsetTable":{
            "TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:250,3:250
            }
        }
    }

The key is ``<topic>@<group>``; the value maps queue id → the *next* offset to consume. Loading
accepts quoted and unquoted queue ids (and a file without ``dataVersion``, as 4.x writes it).

Offsets change with every UPDATE_CONSUMER_OFFSET and every pull carrying the COMMIT_OFFSET
flag, so the table is written periodically (``flush_consumer_offset_interval_ms``) and at
shutdown, and only when something changed since the last write. Any value a client sends is
stored, including -1 (ali-ons sends -1 for offset 0); :meth:`query_offset` reports such
negative values as "none", as RocketMQ's callers treat them.
"""

from __future__ import annotations

import logging
from typing import Any

from rocketq.broker.config_file import JsonConfigFile
from rocketq.broker.data_version import DataVersion
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import as_int

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_offset_key(key: str) -> tuple[str, str]:
    """``topic@group`` → (topic, group). Topics cannot contain ``@``; groups in theory can."""
    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return topic, group


class ConsumerOffsetManager(JsonConfigFile):
    """The committed-offset table. Call from one thread (the event loop)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.offset_table: dict[str, dict[int, int]] = {}
        self.data_version = DataVersion()
        self._dirty = False
        #: (topic, queue id) → smallest committed offset, as of the last encode() and of the
        #: last one written to disk (retention keeps what the written offsets still need).
        self._encoded_min: dict[tuple[str, int], int] = {}
        self._persisted_min: dict[tuple[str, int], int] = {}

    @property
    def dirty(self) -> bool:
        """Changed since the last :meth:`begin_persist`."""
        return self._dirty

    # -- persistence ------------------------------------------------------------------------
    def loaded_summary(self) -> str:
        return f"consumer offsets of {len(self.offset_table)} topic@group entries"

    def decode(self, obj: dict[str, Any]) -> None:
        table = obj.get("offsetTable")
        if isinstance(table, dict):
            for key, queues in table.items():
                if not isinstance(queues, dict) or TOPIC_GROUP_SEPARATOR not in str(key):
                    continue
                parsed: dict[int, int] = {}
                for qid, offset in queues.items():
                    q = as_int(qid, -1)
                    off = as_int(offset, -1)
                    if q >= 0:
                        parsed[q] = off
                self.offset_table[str(key)] = parsed
        if "dataVersion" in obj:
            self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self._persisted_min = self._encoded_min = self.min_committed_offsets()

    def encode(self) -> str:
        """``consumerOffset.json`` content (fastjson style: unquoted queue ids)."""
        self._encoded_min = self.min_committed_offsets()
        return fastjson.dumps(
            {
                "dataVersion": self.data_version.to_json(),
                "offsetTable": {key: dict(sorted(q.items())) for key, q in self.offset_table.items()},
            }
        )

    def begin_persist(self) -> bool:
        """Mark the table clean (bumping its DataVersion) if it changed; True when a write is due."""
        if not self._dirty:
            return False
        self._dirty = False
        self.data_version.next_version()
        return True

    def persist(self) -> None:
        """Write ``consumerOffset.json`` now (synchronously)."""
        if self.path is not None:
            self.begin_persist()
            fastjson.persist(self.path, self.encode())
            self.mark_written()

    def mark_written(self) -> None:
        """The last :meth:`encode` snapshot is on disk (the persister's ``on_written``)."""
        self._persisted_min = self._encoded_min

    def persisted_min_offsets(self) -> dict[tuple[str, int], int]:
        """:meth:`min_committed_offsets` as of the last write to disk (the table as loaded
        before any). Retention uses these, not the newest commits: after a crash the broker
        serves the offsets on disk, and the messages from there on must still exist."""
        return self._persisted_min

    # -- offsets ----------------------------------------------------------------------------
    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = offset_key(topic, group)
        queues = self.offset_table.get(key)
        if queues is None:
            queues = self.offset_table[key] = {}
        old = queues.get(queue_id)
        if old is not None and offset < old:
            log.debug(
                "consumer offset of %s queue %d in group %s moves back from %d to %d (client %s)",
                topic,
                queue_id,
                group,
                old,
                offset,
                client_host,
            )
        if old != offset:
            queues[queue_id] = offset
            self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or -1 when there is none (or a negative one was stored)."""
        queues = self.offset_table.get(offset_key(topic, group))
        if queues is None:
            return -1
        offset = queues.get(queue_id, -1)
        return offset if offset >= 0 else -1

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(offset_key(topic, group), {}))

    def min_committed_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, queue id) the smallest committed offset of any group (negative values
        count as 0). Safe to call from another thread: it iterates over snapshots; the store's
        retention calls it to keep what a group has not consumed."""
        out: dict[tuple[str, int], int] = {}
        for key, queues in list(self.offset_table.items()):
            topic, _ = split_offset_key(key)
            for queue_id, offset in list(queues.items()):
                k = (topic, queue_id)
                value = max(offset, 0)
                old = out.get(k)
                if old is None or value < old:
                    out[k] = value
        return out

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for t, g in map(split_offset_key, self.offset_table) if t == topic}

    def topics_of_group(self, group: str) -> set[str]:
        return {t for t, g in map(split_offset_key, self.offset_table) if g == group}

    def remove(self, topic: str, group: str) -> bool:
        if self.offset_table.pop(offset_key(topic, group), None) is None:
            return False
        self._dirty = True
        return True


__all__ = ["TOPIC_GROUP_SEPARATOR", "ConsumerOffsetManager", "offset_key", "split_offset_key"]

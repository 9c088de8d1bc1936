"""The broker's topic table: system topics, auto-creation, ``config/topics.json``.

:class:`~rocketq.protocol.topic.TopicConfig`, permissions and reserved names are wire vocabulary
(:mod:`rocketq.protocol.topic`); this module keeps the table and its file.

``topics.json`` as RocketMQ writes it (fastjson pretty format, keys alphabetical)::

    {
        "dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000},
        "topicConfigTable":{
            "TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,
                         "topicFilterType":"SINGLE_TAG","topicName":"TopicTest",
                         "topicSysFlag":0,"writeQueueNums":4}
        }
    }

Auto-creation on send (``createTopicInSendMessageMethod``): a send to an unknown topic names a
template (header ``defaultTopic``, ``TBW102``). If the template exists and inherits — ``TBW102``
only while ``auto_create_topic_enable`` — the topic is created with
``min(client default queue nums, template write queues)`` queues and the template's perm minus
INHERIT. Retry and DLQ topics (``%RETRY%<group>``, ``%DLQ%<group>``) are created directly
(``create_in_send_back``). Every change bumps the :class:`DataVersion` and calls ``on_change``
(the broker persists the table and re-registers with the name servers).

Loading is tolerant: a missing, empty or unparsable file falls back to ``topics.json.bak``;
unknown fields of a topic are kept and written back; entries from the file override the built-in
system topics, as in RocketMQ.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from rocketq.broker.config import BrokerConfig
from rocketq.broker.config_file import JsonConfigFile, named_objects
from rocketq.broker.data_version import DataVersion
from rocketq.errors import InvalidParameter
from rocketq.protocol import fastjson
from rocketq.protocol.topic import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    OFFSET_MOVED_EVENT,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    REPLY_TOPIC_POSTFIX,
    SCHEDULE_TOPIC,
    SCHEDULE_TOPIC_QUEUE_NUMS,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TopicConfig,
    is_inherited,
    is_system_topic,
    perm_to_string,
)

log = logging.getLogger(__name__)


def system_topics(cfg: BrokerConfig) -> list[TopicConfig]:
    """The topics a broker creates at start (``TopicConfigManager`` init)."""
    topics = [TopicConfig(SELF_TEST_TOPIC, 1, 1)]
    if cfg.auto_create_topic_enable:
        n = cfg.default_topic_queue_nums
        topics.append(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, n, n, PERM_INHERIT | PERM_READ | PERM_WRITE))
    cluster_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.cluster_topic_enable else 0)
    topics.append(TopicConfig(cfg.broker_cluster_name, perm=cluster_perm))
    broker_perm = PERM_INHERIT | (PERM_READ | PERM_WRITE if cfg.broker_topic_enable else 0)
    topics.append(TopicConfig(cfg.broker_name, 1, 1, broker_perm))
    topics.append(TopicConfig(OFFSET_MOVED_EVENT, 1, 1))
    topics.append(TopicConfig(SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUMS, SCHEDULE_TOPIC_QUEUE_NUMS))
    if cfg.trace_topic_enable:
        topics.append(TopicConfig(cfg.msg_trace_topic_name, 1, 1))
    topics.append(TopicConfig(f"{cfg.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}", 1, 1))
    topics.append(TopicConfig(TRANS_HALF_TOPIC, 1, 1))
    topics.append(TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1))
    # RocketMQ 5 registers the timer topic when timed delivery is on (the store's default)
    topics.append(TopicConfig(TIMER_TOPIC, 1, 1))
    return topics


class TopicConfigManager(JsonConfigFile):
    """The broker's topic table. Call from one thread (the event loop)."""

    def __init__(self, broker_config: BrokerConfig, path: str | None = None) -> None:
        self.broker_config = broker_config
        self.path = path
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        #: Called with the changed topics after every change (persist, register with namesrv).
        self.on_change: Callable[[list[TopicConfig]], None] | None = None
        self._system_names: set[str] = set()
        #: Topics a send created that ``topics.json`` may not hold yet (see :meth:`forget_unsaved`).
        self.unsaved_created: set[str] = set()
        for tc in system_topics(broker_config):
            self.table[tc.topic_name] = tc
            self._system_names.add(tc.topic_name)

    # -- persistence ------------------------------------------------------------------------
    def loaded_summary(self) -> str:
        return f"{len(self.table)} topic configs"

    def decode(self, obj: dict[str, Any]) -> None:
        self.table.update(named_objects(obj, "topicConfigTable", TopicConfig.from_json))
        if "dataVersion" in obj:
            self.data_version = DataVersion.from_json(obj.get("dataVersion"))

    def wrapper(self) -> dict[str, Any]:
        """``TopicConfigSerializeWrapper`` as JSON-ready data (register body, GET_ALL_TOPIC_CONFIG)."""
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.table.items()},
        }

    def encode(self) -> str:
        """``topics.json`` content, in fastjson's pretty format."""
        return fastjson.dumps(self.wrapper())

    def persist(self) -> None:
        """Write ``topics.json`` now (synchronously)."""
        if self.path is not None:
            fastjson.persist(self.path, self.encode())

    # -- queries ----------------------------------------------------------------------------
    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self.table

    def __len__(self) -> int:
        return len(self.table)

    def is_system(self, topic: str) -> bool:
        return topic in self._system_names or is_system_topic(topic)

    def is_order_topic(self, topic: str) -> bool:
        tc = self.table.get(topic)
        return tc is not None and tc.order

    # -- changes ----------------------------------------------------------------------------
    def _changed(self, configs: Iterable[TopicConfig]) -> None:
        self.data_version.next_version()
        changed = list(configs)
        callback = self.on_change
        if callback is not None:
            callback(changed)

    def create_in_send(
        self,
        topic: str,
        default_topic: str,
        remote_address: str,
        client_default_topic_queue_nums: int,
        topic_sys_flag: int = 0,
    ) -> TopicConfig | None:
        """Create ``topic`` from the template ``default_topic`` (``createTopicInSendMessageMethod``);
        None when the template is missing or does not inherit."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        if client_default_topic_queue_nums <= 0:
            raise InvalidParameter(
                f"defaultTopicQueueNums={client_default_topic_queue_nums} cannot create topic {topic}: "
                "it must be at least 1"
            )
        template = self.table.get(default_topic)
        if template is None:
            log.warning(
                "cannot create topic %s: template topic %s does not exist (producer %s)",
                topic,
                default_topic,
                remote_address,
            )
            return None
        perm = template.perm
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.broker_config.auto_create_topic_enable:
            perm = PERM_READ | PERM_WRITE
        if not is_inherited(perm):
            log.warning(
                "cannot create topic %s: template topic %s has perm %s without inherit (producer %s)",
                topic,
                default_topic,
                perm_to_string(perm),
                remote_address,
            )
            return None
        queues = max(0, min(client_default_topic_queue_nums, template.write_queue_nums))
        tc = TopicConfig(
            topic,
            queues,
            queues,
            perm & ~PERM_INHERIT,
            topic_filter_type=template.topic_filter_type,
            topic_sys_flag=topic_sys_flag,
        )
        self.table[topic] = tc
        self.unsaved_created.add(topic)
        log.info(
            "created topic %s from template %s (producer %s): %s", topic, default_topic, remote_address, tc
        )
        self._changed([tc])
        return tc

    def create_in_send_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Create a retry or dead-letter topic if absent (``createTopicInSendMessageBackMethod``)."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self.table[topic] = tc
        self.unsaved_created.add(topic)
        log.info("created topic %s: %s", topic, tc)
        self._changed([tc])
        return tc

    def update(self, tc: TopicConfig) -> TopicConfig | None:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC); returns the previous config."""
        old = self.table.get(tc.topic_name)
        if old == tc:
            return old
        if old is not None and old.extra and not tc.extra:
            tc = replace(tc, extra=dict(old.extra))
        self.table[tc.topic_name] = tc
        self.unsaved_created.discard(tc.topic_name)
        log.info("%s topic %s: %s", "updated" if old else "created", tc.topic_name, tc)
        self._changed([tc])
        return old

    def forget_unsaved(self, topic: str) -> bool:
        """Undo the creation of ``topic`` by a send when ``topics.json`` could not be written
        (a full disk): the send fails and the topic does not exist half-way, in memory but not
        on disk. False when the topic was not created by a send or was saved since."""
        if topic not in self.unsaved_created:
            return False
        self.unsaved_created.discard(topic)
        if self.table.pop(topic, None) is None:
            return False
        log.warning("topic %s created by a send is dropped again: topics.json cannot be written", topic)
        self._changed([])
        return True

    def delete(self, topic: str) -> TopicConfig | None:
        old = self.table.pop(topic, None)
        if old is not None:
            log.info("deleted topic %s", topic)
            self._changed([])
        return old


__all__ = ["TopicConfigManager", "system_topics"]

"""Topic configs: queue counts, permissions, system topics, auto-creation, ``config/topics.json``.

``topics.json`` as RocketMQ writes it (fastjson pretty format, keys alphabetical)::

    {
        "dataVersion":{"counter":2,"stateVersion":0,"timestamp":1700000000000},
        "topicConfigTable":{
            "TopicTest":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,
                         "topicFilterType":"SINGLE_TAG","topicName":"TopicTest",
                         "topicSysFlag":0,"writeQueueNums":4}
        }
    }

Permissions (``PermName``): READ=4, WRITE=2, INHERIT=1 (a template: topics may be created from
it), PRIORITY=8. A normal topic is 6, the auto-create template ``TBW102`` is 7.

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
from dataclasses import dataclass, field, replace
from typing import Any

from rocketq import fastjson
from rocketq.broker.config import BrokerConfig
from rocketq.broker.config_file import JsonConfigFile
from rocketq.broker.data_version import DataVersion
from rocketq.broker.jsonutil import as_bool, as_int, as_str

log = logging.getLogger(__name__)

# PermName
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_inherited(perm: int) -> bool:
    return bool(perm & PERM_INHERIT)


def perm_to_string(perm: int) -> str:
    """``PermName.perm2String``: ``RWX`` with ``-`` for missing bits."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


SINGLE_TAG = "SINGLE_TAG"
MULTI_TAG = "MULTI_TAG"
TOPIC_FILTER_TYPES = (SINGLE_TAG, MULTI_TAG)

# TopicValidator / MixAll names
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_TOPIC_V2 = "SCHEDULE_TOPIC_XXXX_V2"
BENCHMARK_TOPIC = "BenchmarkTest"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: Timed delivery's system topic (``TimerMessageStore.TIMER_TOPIC``; see ``store/timer.py``).
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: Queue count of ``SCHEDULE_TOPIC_XXXX`` (one per delay level).
SCHEDULE_TOPIC_QUEUE_NUMS = 18
#: Queues of a group's dead-letter topic (``MixAll.DLQ_NUMS_PER_GROUP``).
DLQ_NUMS_PER_GROUP = 1

TOPIC_MAX_LENGTH = 127
#: Retry and DLQ topic names may be longer (the group name is up to 120 chars plus the prefix).
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        SCHEDULE_TOPIC_V2,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
#: Topics clients may not send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        SCHEDULE_TOPIC_V2,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def topic_max_length(topic: str) -> int:
    return RETRY_OR_DLQ_TOPIC_MAX_LENGTH if is_retry_topic(topic) or is_dlq_topic(topic) else TOPIC_MAX_LENGTH


_TOPIC_JSON_KEYS = frozenset(
    {
        "attributes",
        "order",
        "perm",
        "readQueueNums",
        "topicFilterType",
        "topicName",
        "topicSysFlag",
        "writeQueueNums",
    }
)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic (RocketMQ ``TopicConfig``); defaults are RocketMQ's constructor defaults."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)
    #: Fields of the file this version does not know, written back unchanged.
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def readable(self) -> bool:
        return is_readable(self.perm)

    @property
    def writeable(self) -> bool:
        return is_writeable(self.perm)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = dict(self.extra)
        obj.update(
            {
                "attributes": dict(self.attributes),
                "order": self.order,
                "perm": self.perm,
                "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type,
                "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums,
            }
        )
        return dict(sorted(obj.items()))

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> TopicConfig:
        """Tolerant decode: missing or malformed fields take RocketMQ's defaults."""
        default = cls(name)
        attrs = obj.get("attributes")
        filter_type = as_str(obj.get("topicFilterType"), SINGLE_TAG)
        return cls(
            topic_name=as_str(obj.get("topicName"), name) or name,
            read_queue_nums=as_int(obj.get("readQueueNums"), default.read_queue_nums),
            write_queue_nums=as_int(obj.get("writeQueueNums"), default.write_queue_nums),
            perm=as_int(obj.get("perm"), default.perm),
            topic_filter_type=filter_type if filter_type in TOPIC_FILTER_TYPES else SINGLE_TAG,
            topic_sys_flag=as_int(obj.get("topicSysFlag"), 0),
            order=as_bool(obj.get("order"), False),
            attributes={str(k): as_str(v, "") for k, v in attrs.items()} if isinstance(attrs, dict) else {},
            extra={k: v for k, v in obj.items() if k not in _TOPIC_JSON_KEYS},
        )


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
        for tc in system_topics(broker_config):
            self.table[tc.topic_name] = tc
            self._system_names.add(tc.topic_name)

    # -- persistence ------------------------------------------------------------------------
    def loaded_summary(self) -> str:
        return f"{len(self.table)} topic configs"

    def decode(self, obj: dict[str, Any]) -> None:
        table = obj.get("topicConfigTable")
        if isinstance(table, dict):
            for name, value in table.items():
                if isinstance(value, dict) and name:
                    self.table[str(name)] = TopicConfig.from_json(str(name), value)
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
        log.info("%s topic %s: %s", "updated" if old else "created", tc.topic_name, tc)
        self._changed([tc])
        return old

    def delete(self, topic: str) -> TopicConfig | None:
        old = self.table.pop(topic, None)
        if old is not None:
            log.info("deleted topic %s", topic)
            self._changed([])
        return old


__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_NUMS_PER_GROUP",
    "MULTI_TAG",
    "NOT_ALLOWED_SEND_TOPICS",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SINGLE_TAG",
    "SYSTEM_TOPICS",
    "TopicConfig",
    "TopicConfigManager",
    "dlq_topic",
    "is_dlq_topic",
    "is_inherited",
    "is_readable",
    "is_retry_topic",
    "is_system_topic",
    "is_writeable",
    "perm_to_string",
    "retry_topic",
    "system_topics",
    "topic_max_length",
]

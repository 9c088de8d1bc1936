"""Topics on the wire and in files: ``TopicConfig``, permissions, and RocketMQ's reserved topic names.

``TopicConfig`` as fastjson writes it (``topics.json``, REGISTER_BROKER bodies, admin bodies),
keys alphabetical::

    {"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",
     "topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}

Two readers, one per source: :meth:`TopicConfig.from_json` is tolerant (config files and admin
requests: a malformed field takes RocketMQ's default, unknown fields are kept in ``extra`` and
written back); :meth:`TopicConfig.from_json_obj` is strict (name-server bodies: a malformed field
raises :class:`~rocketq.errors.BodyFormatError` naming it). The compact form of
``compressedRegister`` bodies is ``name read write perm filterType attributesJson``.

Permissions (``PermName``): READ=4, WRITE=2, INHERIT=1 (a template: topics may be created from
it), PRIORITY=8. A normal topic is 6, the auto-create template ``TBW102`` is 7.

Retry and dead-letter topics of a consumer group are ``%RETRY%<group>`` and ``%DLQ%<group>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketq.errors import BodyFormatError
from rocketq.protocol.fastjson import (
    as_bool,
    as_int,
    as_str,
    dumps_sorted,
    field_bool,
    field_int,
    field_object,
    field_str,
    require_object,
)

# PermName (M/constant/PermName.java).
PERM_PRIORITY: Final = 8
PERM_READ: Final = 4
PERM_WRITE: Final = 2
PERM_INHERIT: Final = 1
# TopicSysFlag.
TOPIC_SYS_FLAG_UNIT: Final = 1
TOPIC_SYS_FLAG_UNIT_SUB: Final = 2


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


SINGLE_TAG: Final = "SINGLE_TAG"
MULTI_TAG: Final = "MULTI_TAG"
TOPIC_FILTER_TYPES: Final = (SINGLE_TAG, MULTI_TAG)
DEFAULT_READ_QUEUE_NUMS: Final = 16
DEFAULT_WRITE_QUEUE_NUMS: Final = 16

# TopicValidator / MixAll names
AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_TOPIC_V2: Final = "SCHEDULE_TOPIC_XXXX_V2"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
#: Timed delivery's system topic (``TimerMessageStore.TIMER_TOPIC``; see ``store/timer.py``).
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
#: Queue count of ``SCHEDULE_TOPIC_XXXX`` (one per delay level).
SCHEDULE_TOPIC_QUEUE_NUMS: Final = 18
#: Queues of a group's dead-letter topic (``MixAll.DLQ_NUMS_PER_GROUP``).
DLQ_NUMS_PER_GROUP: Final = 1

TOPIC_MAX_LENGTH: Final = 127
#: Retry and DLQ topic names may be longer (the group name is up to 120 chars plus the prefix).
RETRY_OR_DLQ_TOPIC_MAX_LENGTH: Final = 255
#: Longest producer or consumer group name a client may use (``Validators.CHARACTER_MAX_LENGTH``).
GROUP_NAME_MAX_LENGTH: Final = 255


def group_name_too_long(group: str, role: str) -> str | None:
    """Why ``group`` is too long for a ``role`` ("producer" or "consumer") group, or None."""
    if len(group) <= GROUP_NAME_MAX_LENGTH:
        return None
    return f"{role} group name of {len(group)} chars exceeds max {GROUP_NAME_MAX_LENGTH} chars"


SYSTEM_TOPICS: Final = frozenset(
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
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
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


def _filter_type(value: Any, what: str) -> str:
    if value is None:
        return TOPIC_FILTER_TYPES[0]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(TOPIC_FILTER_TYPES):
        return TOPIC_FILTER_TYPES[value]
    if isinstance(value, str) and value in TOPIC_FILTER_TYPES:
        return value
    raise BodyFormatError(
        f"{what}: topicFilterType {value!r:.40} is not one of {', '.join(TOPIC_FILTER_TYPES)}"
    )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic (RocketMQ ``TopicConfig``); defaults are RocketMQ's constructor defaults."""

    topic_name: str
    read_queue_nums: int = DEFAULT_READ_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_WRITE_QUEUE_NUMS
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: Fields of a config file this version does not know, written back unchanged.
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def readable(self) -> bool:
        return is_readable(self.perm)

    @property
    def writeable(self) -> bool:
        return is_writeable(self.perm)

    def to_json(self) -> dict[str, Any]:
        """The JSON object, keys alphabetical, ``extra`` fields included."""
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
        """Tolerant decode (config files, admin requests): missing or malformed fields take
        RocketMQ's defaults; unknown fields go to ``extra``."""
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

    @classmethod
    def from_json_obj(cls, obj: Any, topic_name: str | None = None, what: str = "TopicConfig") -> TopicConfig:
        """Strict decode (name-server bodies): BodyFormatError names a malformed field; the filter
        type may be an ordinal; unknown fields are dropped."""
        o = require_object(obj, what)
        name = field_str(o, "topicName", topic_name)
        if not name:
            raise BodyFormatError(f"{what}: no topicName")
        attributes = {str(k): str(v) for k, v in field_object(o, "attributes", what).items() if v is not None}
        return cls(
            topic_name=name,
            read_queue_nums=field_int(o, "readQueueNums", DEFAULT_READ_QUEUE_NUMS, what),
            write_queue_nums=field_int(o, "writeQueueNums", DEFAULT_WRITE_QUEUE_NUMS, what),
            perm=field_int(o, "perm", PERM_READ | PERM_WRITE, what),
            topic_filter_type=_filter_type(o.get("topicFilterType"), what),
            topic_sys_flag=field_int(o, "topicSysFlag", 0, what),
            order=field_bool(o, "order", False),
            attributes=attributes,
        )

    def encode_compact(self) -> str:
        """``TopicConfig.encode()``: ``name read write perm filterType attributesJson``."""
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} "
            f"{self.topic_filter_type} {dumps_sorted(dict(self.attributes))}"
        )

    @classmethod
    def decode_compact(cls, text: str) -> TopicConfig:
        """Read :meth:`encode_compact`'s form (attributes that do not parse are dropped, as Java does)."""
        parts = text.split(" ")
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) < 5:
            raise BodyFormatError(
                f"compact topic config {text!r:.80} has {len(parts)} fields, expected 5 or 6"
            )
        what = f"compact topic config {parts[0]!r}"
        try:
            read, write, perm = int(parts[1]), int(parts[2]), int(parts[3])
        except ValueError:
            raise BodyFormatError(f"{what}: queue numbers/perm are not integers: {text!r:.80}") from None
        attributes: dict[str, str] = {}
        if len(parts) >= 6:
            try:
                parsed = json.loads(parts[5])
                if isinstance(parsed, dict):
                    attributes = {str(k): str(v) for k, v in parsed.items() if v is not None}
            except ValueError:
                pass
        return cls(parts[0], read, write, perm, _filter_type(parts[4], what), attributes=attributes)


__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "BENCHMARK_TOPIC",
    "DEFAULT_READ_QUEUE_NUMS",
    "DEFAULT_WRITE_QUEUE_NUMS",
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_NUMS_PER_GROUP",
    "MULTI_TAG",
    "NOT_ALLOWED_SEND_TOPICS",
    "OFFSET_MOVED_EVENT",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "REPLY_TOPIC_POSTFIX",
    "RETRY_GROUP_TOPIC_PREFIX",
    "RETRY_OR_DLQ_TOPIC_MAX_LENGTH",
    "SCHEDULE_TOPIC",
    "SCHEDULE_TOPIC_QUEUE_NUMS",
    "SCHEDULE_TOPIC_V2",
    "SELF_TEST_TOPIC",
    "SINGLE_TAG",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TIMER_TOPIC",
    "TOPIC_FILTER_TYPES",
    "TOPIC_MAX_LENGTH",
    "TOPIC_SYS_FLAG_UNIT",
    "TOPIC_SYS_FLAG_UNIT_SUB",
    "TRACE_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TopicConfig",
    "dlq_topic",
    "is_dlq_topic",
    "is_inherited",
    "is_readable",
    "is_retry_topic",
    "is_system_topic",
    "is_writeable",
    "perm_to_string",
    "retry_topic",
    "topic_max_length",
]

"""HEART_BEAT bodies and subscriptions (``HeartbeatData``, ``ConsumerData``, ``SubscriptionData``).

Body of HEART_BEAT (34), standard JSON from Java, fastjson-tolerant from anyone::

    {"clientID":"10.0.0.5@12345",
     "producerDataSet":[{"groupName":"PG"}],
     "consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY",
        "messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,
        "subscriptionDataSet":[{"topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],
            "codeSet":[2598919,2598920],"subVersion":1700000000000,"expressionType":"TAG",
            "classFilterMode":false}]}],
     "heartbeatFingerprint":0,"withoutSub":false}

Enums arrive by name; ordinals are accepted too (fastjson does). A tag subscription matches a
ConsumeQueue entry by tags hash code only (``*`` matches everything, an untagged message has
code 0 and matches only ``*``); clients filter again by tag string.

:func:`build_subscription` parses a sub expression the way ``FilterAPI.buildSubscriptionData``
does: ``*`` or empty → everything; otherwise ``||``-separated tags, trimmed, empty pieces dropped.
Other expression types (``SQL92``) are compiled with :func:`rocketq.filter.compile_filter` to
reject bad expressions early; heartbeats are checked the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rocketq.errors import SubscriptionParseFailed
from rocketq.filter import EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL, compile_filter, parse_tags
from rocketq.message import java_string_hash
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import as_bool, as_enum_name, as_int, as_str

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """A consumer's subscription to one topic."""

    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        return self.class_filter_mode or self.sub_string == SUB_ALL or not self.sub_string

    def tags_codes(self) -> frozenset[int] | None:
        """The ConsumeQueue tag codes to let through, or None for "everything"."""
        if self.matches_all or self.expression_type != EXPRESSION_TAG:
            return None
        if self.code_set:
            return self.code_set
        return frozenset(java_string_hash(t) for t in self.tags_set)

    def is_tag_matched(self, tags_code: int) -> bool:
        codes = self.tags_codes()
        return codes is None or tags_code in codes

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionData:
        tags = obj.get("tagsSet")
        codes = obj.get("codeSet")
        expression = as_str(obj.get("expressionType"), EXPRESSION_TAG) or EXPRESSION_TAG
        return cls(
            topic=as_str(obj.get("topic"), ""),
            sub_string=as_str(obj.get("subString"), SUB_ALL),
            tags_set=frozenset(as_str(t, "") for t in tags if isinstance(t, str))
            if isinstance(tags, list)
            else frozenset(),
            code_set=frozenset(as_int(c, 0) for c in codes if not isinstance(c, bool))
            if isinstance(codes, list)
            else frozenset(),
            sub_version=as_int(obj.get("subVersion"), 0),
            expression_type=expression.upper(),
            class_filter_mode=as_bool(obj.get("classFilterMode"), False),
        )


def build_subscription(
    topic: str, sub_string: str | None, expression_type: str | None = None, sub_version: int = 0
) -> SubscriptionData:
    """A subscription from a pull's ``subscription``/``expressionType`` (or a client's subscribe).

    Raises :class:`SubscriptionParseFailed` for an unknown expression type or an expression that
    does not compile (SQL92 messages name the column)."""
    expression = (expression_type or EXPRESSION_TAG).strip().upper() or EXPRESSION_TAG
    if expression != EXPRESSION_TAG:
        compile_filter(expression, sub_string or "")
        return SubscriptionData(topic, sub_string or "", sub_version=sub_version, expression_type=expression)
    try:
        tags = parse_tags(sub_string)
    except SubscriptionParseFailed as exc:
        raise SubscriptionParseFailed(f"topic {topic}: {exc}") from None
    if tags is None:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    return SubscriptionData(
        topic,
        (sub_string or "").strip(),
        tags,
        frozenset(java_string_hash(t) for t in tags),
        sub_version=sub_version,
    )


@dataclass(frozen=True, slots=True)
class ConsumerData:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()
    heartbeat_fingerprint: int = 0
    without_sub: bool = False
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def loads_body(body: bytes) -> Any:
    """A request body as JSON, or as fastjson (RocketMQ's Java clients write unquoted keys and
    the like); ValueError when it is neither."""
    text = body.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # fastjson's reader turns deep nesting into ValueError
        return fastjson.loads(text)


def encode_producer_heartbeat(client_id: str, producer_groups: Iterable[str]) -> bytes:
    """The HEART_BEAT body of a client that only produces (compact JSON, as Java sends it)."""
    data = {
        "clientID": client_id,
        "producerDataSet": [{"groupName": g} for g in producer_groups],
        "consumerDataSet": [],
    }
    return json.dumps(data, separators=(",", ":")).encode()


def parse_heartbeat(body: bytes) -> HeartbeatData:
    """Decode a HEART_BEAT body; raises ValueError when it is not a JSON object, and
    :class:`SubscriptionParseFailed` (a ValueError) when a SQL92 subscription does not compile."""
    obj = loads_body(body)
    if not isinstance(obj, dict):
        raise ValueError(f"heartbeat body is a JSON {type(obj).__name__}, not an object")
    producers: list[str] = []
    for p in obj.get("producerDataSet") or ():
        if isinstance(p, dict):
            name = as_str(p.get("groupName"), "")
            if name:
                producers.append(name)
    consumers: list[ConsumerData] = []
    for c in obj.get("consumerDataSet") or ():
        if not isinstance(c, dict):
            continue
        name = as_str(c.get("groupName"), "")
        if not name:
            continue
        subs = tuple(
            SubscriptionData.from_json(s) for s in c.get("subscriptionDataSet") or () if isinstance(s, dict)
        )
        for sub in subs:
            if sub.expression_type != EXPRESSION_TAG and not sub.class_filter_mode:
                try:
                    compile_filter(sub.expression_type, sub.sub_string)
                except SubscriptionParseFailed as exc:
                    raise SubscriptionParseFailed(f"group {name} topic {sub.topic}: {exc}") from None
        consumers.append(
            ConsumerData(
                group_name=name,
                consume_type=as_enum_name(c.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                message_model=as_enum_name(c.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                consume_from_where=as_enum_name(
                    c.get("consumeFromWhere"), CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET"
                ),
                subscriptions=tuple(s for s in subs if s.topic),
                unit_mode=as_bool(c.get("unitMode"), False),
            )
        )
    return HeartbeatData(
        client_id=as_str(obj.get("clientID"), ""),
        producer_groups=tuple(producers),
        consumers=tuple(consumers),
        heartbeat_fingerprint=as_int(obj.get("heartbeatFingerprint"), 0),
        without_sub=as_bool(obj.get("withoutSub"), False),
        raw=obj,
    )


__all__ = [
    "CONSUME_FROM_WHERE",
    "CONSUME_TYPES",
    "EXPRESSION_SQL92",
    "EXPRESSION_TAG",
    "MESSAGE_MODELS",
    "SUB_ALL",
    "ConsumerData",
    "HeartbeatData",
    "SubscriptionData",
    "build_subscription",
    "encode_producer_heartbeat",
    "loads_body",
    "parse_heartbeat",
]

"""Subscription groups (consumer groups' broker-side settings), ``config/subscriptionGroup.json``.

File shape (fastjson pretty format, keys alphabetical)::

    {
        "dataVersion":{"counter":1,"stateVersion":0,"timestamp":1700000000000},
        "subscriptionGroupTable":{
            "CG":{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,
                  "consumeFromMinEnable":true,"consumeMessageOrderly":false,"consumeTimeoutMinute":15,
                  "groupName":"CG","groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,
                  "retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}
        }
    }

The 4.x fields (``brokerId`` … ``whichBrokerWhenConsumeSlowly``) plus the 5.x scalars are
written; anything else a RocketMQ 5 file carries (``groupRetryPolicy``, ``subscriptionDataSet``,
a top-level ``forbiddenTable``) is kept and written back unchanged.

A group is created on first use (heartbeat, pull, send-back) while
``auto_create_subscription_group`` is on (RocketMQ ``findSubscriptionGroupConfig``); a handful of
system groups exist from the start. Every change bumps the DataVersion and calls ``on_change``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketq.broker.config_file import JsonConfigFile, named_objects
from rocketq.broker.data_version import DataVersion
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import as_bool, as_int, as_str

log = logging.getLogger(__name__)

#: Groups RocketMQ creates at start (``SubscriptionGroupManager.init``; MixAll names).
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)

#: Longest group name RocketMQ accepts.
GROUP_MAX_LENGTH = 120

_KNOWN_KEYS = frozenset(
    {
        "attributes",
        "brokerId",
        "consumeBroadcastEnable",
        "consumeEnable",
        "consumeFromMinEnable",
        "consumeMessageOrderly",
        "consumeTimeoutMinute",
        "groupName",
        "groupSysFlag",
        "notifyConsumerIdsChangedEnable",
        "retryMaxTimes",
        "retryQueueNums",
        "whichBrokerWhenConsumeSlowly",
    }
)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """RocketMQ ``SubscriptionGroupConfig`` with its defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    attributes: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = dict(self.extra)
        obj.update(
            {
                "attributes": dict(self.attributes),
                "brokerId": self.broker_id,
                "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": self.consume_from_min_enable,
                "consumeMessageOrderly": self.consume_message_orderly,
                "consumeTimeoutMinute": self.consume_timeout_minute,
                "groupName": self.group_name,
                "groupSysFlag": self.group_sys_flag,
                "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
                "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            }
        )
        return dict(sorted(obj.items()))

    @classmethod
    def from_json(cls, name: str, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        d = cls(name)
        attrs = obj.get("attributes")
        return cls(
            group_name=as_str(obj.get("groupName"), name) or name,
            consume_enable=as_bool(obj.get("consumeEnable"), d.consume_enable),
            consume_from_min_enable=as_bool(obj.get("consumeFromMinEnable"), d.consume_from_min_enable),
            consume_broadcast_enable=as_bool(obj.get("consumeBroadcastEnable"), d.consume_broadcast_enable),
            consume_message_orderly=as_bool(obj.get("consumeMessageOrderly"), d.consume_message_orderly),
            retry_queue_nums=as_int(obj.get("retryQueueNums"), d.retry_queue_nums),
            retry_max_times=as_int(obj.get("retryMaxTimes"), d.retry_max_times),
            broker_id=as_int(obj.get("brokerId"), d.broker_id),
            which_broker_when_consume_slowly=as_int(
                obj.get("whichBrokerWhenConsumeSlowly"), d.which_broker_when_consume_slowly
            ),
            notify_consumer_ids_changed_enable=as_bool(
                obj.get("notifyConsumerIdsChangedEnable"), d.notify_consumer_ids_changed_enable
            ),
            group_sys_flag=as_int(obj.get("groupSysFlag"), d.group_sys_flag),
            consume_timeout_minute=as_int(obj.get("consumeTimeoutMinute"), d.consume_timeout_minute),
            attributes={str(k): as_str(v, "") for k, v in attrs.items()} if isinstance(attrs, dict) else {},
            extra={k: v for k, v in obj.items() if k not in _KNOWN_KEYS},
        )


def group_name_problem(group: str) -> str | None:
    """Why ``group`` is not a valid group name (RocketMQ's topic/group character rules), or None."""
    if not group:
        return "consumer group name is empty"
    if len(group) > GROUP_MAX_LENGTH:
        return f"consumer group name of {len(group)} chars exceeds max {GROUP_MAX_LENGTH} chars"
    for ch in group:
        if not (ch.isascii() and (ch.isalnum() or ch in "%|_-")):
            return f"consumer group name {group[:64]!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


class SubscriptionGroupManager(JsonConfigFile):
    """The broker's subscription-group table. Call from one thread (the event loop)."""

    def __init__(self, path: str | None = None, *, auto_create: bool = True) -> None:
        self.path = path
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {
            g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS
        }
        self.data_version = DataVersion()
        self.top_level_extra: dict[str, Any] = {}
        self.on_change: Callable[[], None] | None = None

    def loaded_summary(self) -> str:
        return f"{len(self.table)} subscription groups"

    def decode(self, obj: dict[str, Any]) -> None:
        self.table.update(named_objects(obj, "subscriptionGroupTable", SubscriptionGroupConfig.from_json))
        if "dataVersion" in obj:
            self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.top_level_extra = {
            k: v for k, v in obj.items() if k not in ("subscriptionGroupTable", "dataVersion")
        }

    def encode(self) -> str:
        obj: dict[str, Any] = dict(self.top_level_extra)
        obj["dataVersion"] = self.data_version.to_json()
        obj["subscriptionGroupTable"] = {name: g.to_json() for name, g in self.table.items()}
        return fastjson.dumps(dict(sorted(obj.items())))

    def persist(self) -> None:
        if self.path is not None:
            fastjson.persist(self.path, self.encode())

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def __contains__(self, group: object) -> bool:
        return group in self.table

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults if absent and auto-creation is on."""
        config = self.table.get(group)
        if config is not None or not self.auto_create or group_name_problem(group) is not None:
            return config
        config = SubscriptionGroupConfig(group)
        self.table[group] = config
        log.info("auto-created subscription group %s", group)
        self._changed()
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        if self.table.get(config.group_name) == config:
            return
        self.table[config.group_name] = config
        self._changed()

    def delete(self, group: str) -> SubscriptionGroupConfig | None:
        old = self.table.pop(group, None)
        if old is not None:
            self._changed()
        return old

    def _changed(self) -> None:
        self.data_version.next_version()
        if self.on_change is not None:
            self.on_change()


__all__ = ["SYSTEM_GROUPS", "SubscriptionGroupConfig", "SubscriptionGroupManager", "group_name_problem"]

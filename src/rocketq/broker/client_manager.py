"""Who is connected: producer and consumer groups, their channels and subscriptions.

Filled by HEART_BEAT (every 30 s from each client), emptied by UNREGISTER_CLIENT, by the
connection closing, and by expiry (no heartbeat for ``channel_expired_timeout_ms``, 120 s).
A *channel* is a client connection (:class:`~rocketq.remoting.Connection`); one client id may
have one channel per broker port it uses.

Per consumer group the manager keeps (RocketMQ ``ConsumerGroupInfo``)::

    channels       channel → ClientChannelInfo(client id, language, version, last heartbeat)
    subscriptions  topic → SubscriptionData (newest heartbeat wins; a higher subVersion replaces)
    consume type / message model / consume-from-where of the latest heartbeat

Whenever the set of channels of a group changes — a new channel, an unregister, a close, an
expiry — or a heartbeat adds or drops a subscribed topic, ``on_ids_changed(group, channels)`` is
called with the channels that remain. The broker answers that by sending
NOTIFY_CONSUMER_IDS_CHANGED (40) oneway to each of them (clients rebalance at once instead of
within 20 s). The manager itself does no I/O except closing expired channels.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from rocketq.protocol.heartbeat import SubscriptionData
from rocketq.remoting.command import RemotingCommand
from rocketq.wallclock import wall_clock_ms

log = logging.getLogger(__name__)

#: A client channel without a heartbeat for this long is dropped (RocketMQ's default).
CHANNEL_EXPIRED_TIMEOUT_MS = 120_000


class Channel(Protocol):
    """What the managers need of a connection (``rocketq.remoting.Connection`` fits)."""

    remote_address: str

    @property
    def closed(self) -> bool: ...

    def send_oneway(self, cmd: RemotingCommand) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True, eq=False)
class ClientChannelInfo:
    channel: Channel
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update_ms: int = field(default_factory=wall_clock_ms)


IdsChangedListener = Callable[[str, list[Channel]], None]


@dataclass(slots=True, eq=False)
class ConsumerGroupInfo:
    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Channel, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_ms: int = field(default_factory=wall_clock_ms)

    def client_ids(self) -> list[str]:
        """Client ids of the live channels (deduplicated, in registration order)."""
        return list(dict.fromkeys(info.client_id for info in self.channels.values() if info.client_id))

    def all_channels(self) -> list[Channel]:
        return list(self.channels)

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_channel(
        self, info: ClientChannelInfo, consume_type: str, message_model: str, consume_from_where: str
    ) -> bool:
        """Register or refresh a channel; True when it is new to the group."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        existing = self.channels.get(info.channel)
        self.last_update_ms = info.last_update_ms
        if existing is None:
            self.channels[info.channel] = info
            return True
        if existing.client_id != info.client_id:
            log.warning(
                "consumer channel %s of group %s changed client id %s -> %s",
                info.channel.remote_address,
                self.group_name,
                existing.client_id,
                info.client_id,
            )
            self.channels[info.channel] = info
            return False
        existing.last_update_ms = info.last_update_ms
        existing.language = info.language
        existing.version = info.version
        return False

    def update_subscriptions(self, subs: Iterable[SubscriptionData]) -> bool:
        """Apply a heartbeat's subscriptions; True when a topic was added or dropped."""
        updated = False
        topics = set()
        for sub in subs:
            topics.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                updated = True
            elif sub.sub_version >= old.sub_version and sub != old:
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in topics]:
            del self.subscriptions[topic]
            updated = True
        self.last_update_ms = wall_clock_ms()
        return updated

    def unregister_channel(self, channel: Channel) -> bool:
        return self.channels.pop(channel, None) is not None


class ConsumerManager:
    """Consumer groups by name. Call from one thread (the event loop)."""

    def __init__(
        self,
        *,
        channel_expired_timeout_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS,
        on_ids_changed: IdsChangedListener | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.channel_expired_timeout_ms = channel_expired_timeout_ms
        self.on_ids_changed = on_ids_changed
        self._clock_ms = clock_ms
        self.table: dict[str, ConsumerGroupInfo] = {}

    def _notify(self, group: str, info: ConsumerGroupInfo | None) -> None:
        listener = self.on_ids_changed
        if listener is not None:
            listener(group, info.all_channels() if info is not None else [])

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.table.get(group)
        return info.subscriptions.get(topic) if info is not None else None

    def groups_of_topic(self, topic: str) -> list[str]:
        return [g for g, info in self.table.items() if topic in info.subscriptions]

    def register_consumer(
        self,
        group: str,
        channel_info: ClientChannelInfo,
        consume_type: str,
        message_model: str,
        consume_from_where: str,
        subscriptions: Iterable[SubscriptionData] | None,
    ) -> bool:
        """Register or refresh a consumer channel; ``subscriptions`` None keeps the known ones
        (a heartbeat without subscriptions). True when the group's members or topics changed."""
        channel_info.last_update_ms = self._clock_ms()
        info = self.table.get(group)
        if info is None:
            info = self.table[group] = ConsumerGroupInfo(
                group, consume_type, message_model, consume_from_where
            )
        new_channel = info.update_channel(channel_info, consume_type, message_model, consume_from_where)
        if new_channel:
            log.info(
                "consumer %s (%s) joined group %s",
                channel_info.client_id,
                channel_info.channel.remote_address,
                group,
            )
        topics_changed = info.update_subscriptions(subscriptions) if subscriptions is not None else False
        changed = new_channel or topics_changed
        if changed:
            self._notify(group, info)
        return changed

    def unregister_consumer(self, group: str, channel: Channel) -> bool:
        info = self.table.get(group)
        if info is None or not info.unregister_channel(channel):
            return False
        log.info("consumer %s left group %s", channel.remote_address, group)
        if not info.channels:
            del self.table[group]
        self._notify(group, info)
        return True

    def do_channel_close_event(self, channel: Channel) -> list[str]:
        """Drop a closed channel from every group; returns the groups it was in."""
        affected = []
        for group, info in list(self.table.items()):
            if info.unregister_channel(channel):
                affected.append(group)
                log.info("consumer channel %s of group %s closed", channel.remote_address, group)
                if not info.channels:
                    del self.table[group]
                self._notify(group, info)
        return affected

    def scan_not_active_channels(self) -> list[ClientChannelInfo]:
        """Drop (and close) channels without a heartbeat for ``channel_expired_timeout_ms``."""
        now = self._clock_ms()
        expired: list[ClientChannelInfo] = []
        for group, info in list(self.table.items()):
            gone = [
                c for c in info.channels.values() if now - c.last_update_ms > self.channel_expired_timeout_ms
            ]
            for channel_info in gone:
                log.warning(
                    "consumer %s (%s) of group %s sent no heartbeat for %d ms; dropping it",
                    channel_info.client_id,
                    channel_info.channel.remote_address,
                    group,
                    now - channel_info.last_update_ms,
                )
                info.unregister_channel(channel_info.channel)
                expired.append(channel_info)
            if gone:
                if not info.channels:
                    del self.table[group]
                self._notify(group, info)
        for channel_info in expired:
            channel_info.channel.close()
        return expired


class ProducerManager:
    """Producer groups by name. Call from one thread (the event loop)."""

    def __init__(
        self,
        *,
        channel_expired_timeout_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.channel_expired_timeout_ms = channel_expired_timeout_ms
        self._clock_ms = clock_ms
        self.table: dict[str, dict[Channel, ClientChannelInfo]] = {}

    def register_producer(self, group: str, channel_info: ClientChannelInfo) -> bool:
        channel_info.last_update_ms = self._clock_ms()
        channels = self.table.setdefault(group, {})
        existing = channels.get(channel_info.channel)
        if existing is None:
            channels[channel_info.channel] = channel_info
            log.info("producer %s joined group %s", channel_info.client_id, group)
            return True
        existing.last_update_ms = channel_info.last_update_ms
        return False

    def unregister_producer(self, group: str, channel: Channel) -> bool:
        channels = self.table.get(group)
        if channels is None or channels.pop(channel, None) is None:
            return False
        if not channels:
            del self.table[group]
        return True

    def do_channel_close_event(self, channel: Channel) -> list[str]:
        affected = []
        for group, channels in list(self.table.items()):
            if channels.pop(channel, None) is not None:
                affected.append(group)
                if not channels:
                    del self.table[group]
        return affected

    def scan_not_active_channels(self) -> list[ClientChannelInfo]:
        now = self._clock_ms()
        expired: list[ClientChannelInfo] = []
        for group, channels in list(self.table.items()):
            for channel, info in list(channels.items()):
                if now - info.last_update_ms > self.channel_expired_timeout_ms:
                    log.warning(
                        "producer %s (%s) of group %s sent no heartbeat for %d ms; dropping it",
                        info.client_id,
                        channel.remote_address,
                        group,
                        now - info.last_update_ms,
                    )
                    del channels[channel]
                    expired.append(info)
            if not channels:
                del self.table[group]
        for info in expired:
            info.channel.close()
        return expired

    def group_channels(self, group: str) -> list[ClientChannelInfo]:
        return list(self.table.get(group, {}).values())


__all__ = [
    "CHANNEL_EXPIRED_TIMEOUT_MS",
    "Channel",
    "ClientChannelInfo",
    "ConsumerGroupInfo",
    "ConsumerManager",
    "IdsChangedListener",
    "ProducerManager",
]

"""The name server's route table (RocketMQ ``RouteInfoManager`` + ``KVConfigManager``), pure.

One idea: the name server's route table, its tables and the rules that keep them consistent.

No sockets, no clock, no threads: callers pass the time (``now_ms``, any monotonic millisecond
clock) and an opaque ``channel`` token (the connection a broker registered on), and act on what
the methods return (e.g. close the channels of expired brokers). One instance is owned by one
event loop; nothing here locks.

Tables (keys → values), as in RocketMQ 5.x::

    topic_queue      topic → {brokerName → QueueData}         from the masters' topic configs
    broker_addr      brokerName → cluster, {brokerId → addr}   brokerId 0 = master
    cluster_addr     cluster → {brokerName}
    broker_live      (cluster, addr) → last update, heartbeat timeout, DataVersion, channel, HA addr
    filter_server    (cluster, addr) → [filter server addr]
    kv               namespace → {key → value}                 ORDER_TOPIC_CONFIG feeds orderTopicConf

Invariants and rules (RocketMQ's, except where marked):

* One ``ip:port`` has one brokerId per broker name: a slave re-registering as master (id 0)
  loses its old id entry first.
* Queue data comes from the master's topic configs (or, for 5.x brokers, which send the
  ``enableActingMaster`` header, from the lowest-id member while there is no master; its write
  permission is then wiped if acting-master mode is on).
* A registration re-reads the topic configs only when the broker is new, its DataVersion differs
  from the one stored for ``(cluster, addr)``, or a topic has no queue data for this broker name
  (a topic deleted from the name server comes back with the broker's next registration).
* A broker not heard from (REGISTER_BROKER, BROKER_HEARTBEAT, QUERY_DATA_VERSION) for longer than
  its heartbeat timeout (default 120 s) is removed by :meth:`RouteTable.scan_expired`; removing
  the last member of a broker name removes the name from its cluster (and an empty cluster) and
  that name's queue data from every topic (and a topic left without queue data).
* When a broker's channel closes, every broker registered on it is removed
  (:meth:`RouteTable.on_channel_closed`); Java removes only the first one it finds.
* A route needs queue data and at least one known broker name; otherwise the topic has none.

Beyond RocketMQ: lists come out sorted (Java's come in hash order; a client must not depend on
either), and a first registration carrying exactly one topic is accepted (5.x refuses it until the
broker id is known, which would strand a small broker whose only topic is its first).

The values returned (TopicRouteData, ClusterInfo, TopicList, …) and their exact JSON are in
:mod:`rocketq.protocol.route`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketq.protocol.route import (
    MASTER_ID,
    NAMESPACE_ORDER_TOPIC_CONFIG,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicList,
    TopicRouteData,
)
from rocketq.protocol.topic import (
    PERM_READ,
    PERM_WRITE,
    TOPIC_SYS_FLAG_UNIT,
    TOPIC_SYS_FLAG_UNIT_SUB,
    TopicConfig,
)

log = logging.getLogger(__name__)

#: How long a broker may stay silent before it is removed (``DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``).
DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS: Final = 120_000


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What a REGISTER_BROKER answer needs, and what the registration did."""

    #: For a slave: the master's address and HA address, when the master is registered.
    master_addr: str | None = None
    ha_server_addr: str | None = None
    #: The broker name or this broker id was new.
    first_registration: bool = False
    #: At least one topic's queue data was (re)written from the broker's topic configs.
    topic_config_applied: bool = False
    #: False when refused: another address holds this broker id with a newer stateVersion.
    accepted: bool = True


@dataclass(frozen=True, slots=True)
class RemovedBroker:
    """A broker taken out of the table (expired, or its channel closed)."""

    cluster: str
    broker_addr: str
    broker_name: str | None
    broker_id: int | None
    channel: object | None = field(default=None, compare=False)
    #: Its broker name has no member left (its queue data went with it).
    broker_name_removed: bool = False


@dataclass(frozen=True, slots=True)
class BrokerLiveInfo:
    """A snapshot of one broker's liveness entry."""

    cluster: str
    broker_addr: str
    last_update_ms: int
    heartbeat_timeout_ms: int
    data_version: DataVersion
    ha_server_addr: str | None
    channel: object | None = field(default=None, compare=False)


@dataclass(slots=True)
class _Live:
    last_update_ms: int
    heartbeat_timeout_ms: int
    data_version: DataVersion
    channel: object | None
    ha_server_addr: str | None
    #: the DLedger term the broker registered in (rocketq's ``dLegerTerm`` field), None: not sent
    term: int | None = None


@dataclass(frozen=True, slots=True)
class Displacement:
    """Why a registration would displace a live broker (:meth:`RouteTable.displacement`)."""

    reason: str
    #: The same broker address is live on another connection (not another address).
    other_connection: bool


@dataclass(slots=True)
class _Group:
    """The members of one broker name."""

    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False

    def snapshot(self) -> BrokerData:
        return BrokerData(
            self.cluster,
            self.broker_name,
            dict(sorted(self.addrs.items())),
            self.zone_name,
            self.enable_acting_master,
        )

    def has_master(self) -> bool:
        return bool(self.addrs) and min(self.addrs) == MASTER_ID


_BrokerKey = tuple[str, str]  # (cluster, broker addr)


class RouteTable:
    """RocketMQ's route and KV tables; see the module docstring for the rules."""

    def __init__(self) -> None:
        self._topic_queue: dict[str, dict[str, QueueData]] = {}
        self._groups: dict[str, _Group] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live: dict[_BrokerKey, _Live] = {}
        self._filter_servers: dict[_BrokerKey, tuple[str, ...]] = {}
        self._mapping_info: dict[str, dict[str, Any]] = {}  # topic -> {bname -> TopicQueueMappingInfo}
        self._kv: dict[str, dict[str, str]] = {}

    # -- brokers ------------------------------------------------------------------------------

    def register_broker(
        self,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        ha_server_addr: str | None,
        topic_config_table: Mapping[str, TopicConfig] | Iterable[TopicConfig] | None,
        data_version: DataVersion,
        now_ms: int,
        heartbeat_timeout_ms: int = DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS,
        filter_servers: Iterable[str] | None = None,
        *,
        enable_acting_master: bool | None = None,
        zone_name: str | None = None,
        channel: object | None = None,
        delete_missing_topics: bool = False,
        topic_queue_mapping_info: Mapping[str, Any] | None = None,
        term: int | None = None,
    ) -> RegisterBrokerResult:
        """Register (or refresh) one broker and, when due, its topics' queue data.

        ``enable_acting_master`` None means the broker did not send the field (pre-5.x).
        ``delete_missing_topics`` drops this broker name's queue data of topics absent from
        ``topic_config_table`` when the configs are re-read (``deleteTopicWithBrokerRegistration``)."""
        if topic_config_table is None:
            configs: list[TopicConfig] | None = None
        elif isinstance(topic_config_table, Mapping):
            configs = list(topic_config_table.values())
        else:
            configs = list(topic_config_table)

        self._clusters.setdefault(cluster, set()).add(broker_name)
        first = False
        group = self._groups.get(broker_name)
        if group is None:
            first = True
            group = self._groups[broker_name] = _Group(cluster, broker_name)
        group.enable_acting_master = bool(enable_acting_master)
        group.zone_name = zone_name
        addrs = group.addrs

        # One record per ip:port: a slave switched to master first loses its old id.
        for stale_id in [bid for bid, addr in addrs.items() if addr == broker_addr and bid != broker_id]:
            del addrs[stale_id]

        old_addr = addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            old_live = self._live.get((cluster, old_addr))
            if old_live is not None and old_live.data_version.state_version > data_version.state_version:
                log.warning(
                    "refusing registration of %s as %s/%d: %s holds that id with stateVersion %d > %d",
                    broker_addr,
                    broker_name,
                    broker_id,
                    old_addr,
                    old_live.data_version.state_version,
                    data_version.state_version,
                )
                self._live.pop((cluster, broker_addr), None)
                return RegisterBrokerResult(accepted=False)

        addrs[broker_id] = broker_addr
        first = first or not old_addr

        key = (cluster, broker_addr)
        prev = self._live.get(key)
        version_changed = prev is None or prev.data_version != data_version
        is_master = broker_id == MASTER_ID
        is_prime_slave = enable_acting_master is not None and not is_master and broker_id == min(addrs)
        applied = False
        if configs is not None and (is_master or is_prime_slave):
            if delete_missing_topics and not topic_queue_mapping_info and (first or version_changed):
                keep = {tc.topic_name for tc in configs}
                for topic in [t for t, qmap in self._topic_queue.items() if broker_name in qmap]:
                    if topic not in keep:
                        self._remove_queue_data(topic, broker_name)
            wipe_write = is_prime_slave and group.enable_acting_master
            for tc in configs:
                known = self._topic_queue.get(tc.topic_name)
                if first or version_changed or not known or broker_name not in known:
                    perm = tc.perm & ~PERM_WRITE if wipe_write else tc.perm
                    self._put_queue_data(
                        tc.topic_name,
                        QueueData(
                            broker_name, tc.read_queue_nums, tc.write_queue_nums, perm, tc.topic_sys_flag
                        ),
                    )
                    applied = True
            if topic_queue_mapping_info and (first or version_changed):
                for topic, info in topic_queue_mapping_info.items():
                    bname = info.get("bname", broker_name) if isinstance(info, Mapping) else broker_name
                    self._mapping_info.setdefault(str(topic), {})[str(bname)] = info

        if prev is None:
            log.info(
                "new broker registered: %s %s/%d at %s, HA %s",
                cluster,
                broker_name,
                broker_id,
                broker_addr,
                ha_server_addr,
            )
        self._live[key] = _Live(now_ms, heartbeat_timeout_ms, data_version, channel, ha_server_addr, term)

        if filter_servers is not None:
            servers = tuple(filter_servers)
            if servers:
                self._filter_servers[key] = servers
            else:
                self._filter_servers.pop(key, None)

        master_addr = ha_addr = None
        if not is_master:
            candidate = addrs.get(MASTER_ID)
            if candidate is not None:
                master_live = self._live.get((cluster, candidate))
                if master_live is not None:
                    master_addr, ha_addr = candidate, master_live.ha_server_addr
        return RegisterBrokerResult(master_addr, ha_addr, first, applied)

    def displacement(
        self,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        channel: object | None,
        now_ms: int,
        term: int | None = None,
    ) -> Displacement | None:
        """Whether a registration (or unregistration) of ``broker_name``/``broker_id`` at
        ``broker_addr`` arriving on ``channel`` would displace another live broker.

        It would when a live broker holds that name and id at another address, or when the
        broker at ``broker_addr`` is live on another channel (a broker registers on its own
        connection; its entry goes when that connection closes).

        One exception: the master of a DLedger group (brokerId 0) is taken over by a broker that
        registers in a higher DLedger ``term`` than the live holder's. A new leader is elected
        while the old one may still hold its name-server connection (a paused or hung process,
        a leader cut off from its peers only): the term says which one the group follows."""
        group = self._groups.get(broker_name)
        if group is not None:
            holder = group.addrs.get(broker_id)
            if holder is not None and holder != broker_addr:
                live = self._live.get((group.cluster, holder))
                newer_leader = (
                    broker_id == MASTER_ID
                    and term is not None
                    and live is not None
                    and live.term is not None
                    and term > live.term
                )
                if (
                    live is not None
                    and live.last_update_ms + live.heartbeat_timeout_ms >= now_ms
                    and not newer_leader
                ):
                    return Displacement(f"broker {broker_name}/{broker_id} is live at {holder}", False)
        clusters = {cluster} if group is None else {cluster, group.cluster}
        for name in sorted(clusters):
            live = self._live.get((name, broker_addr))
            if (
                live is not None
                and live.channel is not None
                and channel is not None
                and live.channel is not channel
                and live.last_update_ms + live.heartbeat_timeout_ms >= now_ms
            ):
                return Displacement(f"the broker at {broker_addr} is live on another connection", True)
        return None

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """Remove one broker (UNREGISTER_BROKER). True if anything was removed."""
        return self._unregister(cluster, broker_addr, broker_name, broker_id) is not None

    def _unregister(
        self, cluster: str, broker_addr: str, broker_name: str | None, broker_id: int | None
    ) -> RemovedBroker | None:
        key = (cluster, broker_addr)
        live = self._live.pop(key, None)
        self._filter_servers.pop(key, None)
        removed_any = live is not None
        name_removed = False
        group = self._groups.get(broker_name) if broker_name is not None else None
        if group is not None:
            stale = [bid for bid, addr in group.addrs.items() if addr == broker_addr]
            for bid in stale:
                del group.addrs[bid]
            removed_any = removed_any or bool(stale)
            if not group.addrs:
                del self._groups[group.broker_name]
                name_removed = True
        if name_removed and broker_name is not None:
            names = self._clusters.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self._clusters[cluster]
            for topic in list(self._topic_queue):
                self._remove_queue_data(topic, broker_name)
            log.info(
                "broker name %s removed from cluster %s (last member %s gone)",
                broker_name,
                cluster,
                broker_addr,
            )
        elif group is not None and group.enable_acting_master and not group.has_master():
            # 5.x: the master of an acting-master group left; its topics become read-only.
            for qmap in self._topic_queue.values():
                qd = qmap.get(group.broker_name)
                if qd is not None and qd.perm & PERM_WRITE:
                    qmap[group.broker_name] = _with_perm(qd, qd.perm & ~PERM_WRITE)
        if not removed_any:
            return None
        return RemovedBroker(
            cluster, broker_addr, broker_name, broker_id, live.channel if live else None, name_removed
        )

    def _remove_live(self, key: _BrokerKey) -> RemovedBroker:
        cluster, addr = key
        name: str | None = None
        bid: int | None = None
        for group in self._groups.values():
            if group.cluster != cluster:
                continue
            for member_id, member_addr in group.addrs.items():
                if member_addr == addr:
                    name, bid = group.broker_name, member_id
                    break
            if name is not None:
                break
        channel = self._live[key].channel if key in self._live else None
        removed = self._unregister(cluster, addr, name, bid)
        return removed or RemovedBroker(cluster, addr, name, bid, channel)

    def scan_expired(self, now_ms: int) -> list[RemovedBroker]:
        """Remove every broker silent for longer than its heartbeat timeout; return them."""
        expired = [
            key
            for key, live in self._live.items()
            if live.last_update_ms + live.heartbeat_timeout_ms < now_ms
        ]
        removed = []
        for key in expired:
            live = self._live[key]
            log.warning(
                "broker %s of cluster %s expired: silent for %d ms (timeout %d ms)",
                key[1],
                key[0],
                now_ms - live.last_update_ms,
                live.heartbeat_timeout_ms,
            )
            removed.append(self._remove_live(key))
        return removed

    def on_channel_closed(self, channel: object) -> list[RemovedBroker]:
        """Remove every broker registered on ``channel`` (its connection closed)."""
        keys = [key for key, live in self._live.items() if live.channel is channel]
        removed = []
        for key in keys:
            log.info("channel of broker %s (cluster %s) closed; removing it", key[1], key[0])
            removed.append(self._remove_live(key))
        return removed

    def touch_broker(self, cluster: str, broker_addr: str, now_ms: int) -> bool:
        """Record a sign of life (BROKER_HEARTBEAT). False if the broker is not registered."""
        live = self._live.get((cluster, broker_addr))
        if live is None:
            return False
        live.last_update_ms = now_ms
        return True

    def broker_data_version(self, cluster: str, broker_addr: str) -> DataVersion | None:
        """The DataVersion stored at the broker's last registration."""
        live = self._live.get((cluster, broker_addr))
        return live.data_version if live is not None else None

    def is_broker_topic_config_changed(
        self, cluster: str, broker_addr: str, data_version: DataVersion | None
    ) -> bool:
        """True unless the broker is registered with exactly ``data_version``."""
        stored = self.broker_data_version(cluster, broker_addr)
        return stored is None or stored != data_version

    def query_data_version(
        self, cluster: str, broker_addr: str, data_version: DataVersion | None, now_ms: int
    ) -> tuple[bool, DataVersion | None]:
        """QUERY_DATA_VERSION: (changed, the stored version), refreshing the broker's liveness."""
        changed = self.is_broker_topic_config_changed(cluster, broker_addr, data_version)
        self.touch_broker(cluster, broker_addr, now_ms)
        return changed, self.broker_data_version(cluster, broker_addr)

    def live_brokers(self) -> list[BrokerLiveInfo]:
        """Snapshots of every liveness entry, sorted by (cluster, addr)."""
        return [
            BrokerLiveInfo(
                c, a, v.last_update_ms, v.heartbeat_timeout_ms, v.data_version, v.ha_server_addr, v.channel
            )
            for (c, a), v in sorted(self._live.items())
        ]

    def broker_data(self, broker_name: str) -> BrokerData | None:
        group = self._groups.get(broker_name)
        return group.snapshot() if group is not None else None

    # -- topics -------------------------------------------------------------------------------

    def _put_queue_data(self, topic: str, qd: QueueData) -> None:
        qmap = self._topic_queue.get(topic)
        if qmap is None:
            self._topic_queue[topic] = {qd.broker_name: qd}
            log.debug("new topic registered: %s %s", topic, qd)
            return
        old = qmap.get(qd.broker_name)
        if old != qd:
            if old is not None:
                log.debug("topic changed: %s OLD %s NEW %s", topic, old, qd)
            qmap[qd.broker_name] = qd

    def _remove_queue_data(self, topic: str, broker_name: str) -> None:
        qmap = self._topic_queue.get(topic)
        if qmap is None:
            return
        qmap.pop(broker_name, None)
        if not qmap:
            del self._topic_queue[topic]

    def pick_topic_route(self, topic: str, *, with_order_topic_conf: bool = True) -> TopicRouteData | None:
        """The route of ``topic``, or None when no broker serves it. ``orderTopicConf`` is the
        topic's ORDER_TOPIC_CONFIG KV entry when there is one and ``with_order_topic_conf``."""
        qmap = self._topic_queue.get(topic)
        if not qmap:
            return None
        brokers: list[BrokerData] = []
        filters: dict[str, tuple[str, ...]] = {}
        for name in sorted(qmap):
            group = self._groups.get(name)
            if group is None:
                continue
            data = group.snapshot()
            brokers.append(data)
            if self._filter_servers:
                for addr in data.broker_addrs.values():
                    servers = self._filter_servers.get((data.cluster, addr))
                    if servers:
                        filters[addr] = servers
        if not brokers:
            return None
        order_conf = self.get_kv(NAMESPACE_ORDER_TOPIC_CONFIG, topic) if with_order_topic_conf else None
        mapping = self._mapping_info.get(topic)
        return TopicRouteData(
            queue_datas=tuple(qmap[name] for name in sorted(qmap)),
            broker_datas=tuple(brokers),
            filter_server_table=filters,
            order_topic_conf=order_conf,
            topic_queue_mapping_by_broker=dict(mapping) if mapping else None,
        )

    def queue_datas(self, topic: str) -> dict[str, QueueData]:
        """The topic's queue data by broker name (a copy; empty if unknown)."""
        return dict(self._topic_queue.get(topic, {}))

    def register_topic(self, topic: str, queue_datas: Iterable[QueueData]) -> bool:
        """REGISTER_TOPIC_IN_NAMESRV: set queue data for known broker names. Nothing changes
        (False) if the list is empty or names an unknown broker."""
        items = list(queue_datas)
        if not items:
            return False
        unknown = [qd.broker_name for qd in items if qd.broker_name not in self._groups]
        if unknown:
            log.warning("register topic %s names unknown brokers %s; ignored", topic, unknown)
            return False
        for qd in items:
            self._topic_queue.setdefault(topic, {})[qd.broker_name] = qd
        return True

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """Drop the topic's queue data: everywhere, or (``cluster``) of that cluster's brokers."""
        if not cluster:
            return self._topic_queue.pop(topic, None) is not None
        names = self._clusters.get(cluster)
        qmap = self._topic_queue.get(topic)
        if not names or qmap is None:
            return False
        removed = [name for name in names if qmap.pop(name, None) is not None]
        if not qmap:
            del self._topic_queue[topic]
        return bool(removed)

    def wipe_write_perm(self, broker_name: str) -> int:
        """Clear PERM_WRITE on every topic of ``broker_name``; the number of topics touched."""
        return self._set_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """Set every topic of ``broker_name`` to read-write (6), as Java's ADD_WRITE_PERM does."""
        return self._set_perm(broker_name, lambda _perm: PERM_READ | PERM_WRITE)

    def _set_perm(self, broker_name: str, change: Any) -> int:
        count = 0
        for qmap in self._topic_queue.values():
            qd = qmap.get(broker_name)
            if qd is not None:
                qmap[broker_name] = _with_perm(qd, int(change(qd.perm)))
                count += 1
        return count

    # -- listings -----------------------------------------------------------------------------

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {name: self._groups[name].snapshot() for name in sorted(self._groups)},
            {cluster: tuple(sorted(names)) for cluster, names in sorted(self._clusters.items())},
        )

    def all_topics(self) -> list[str]:
        return sorted(self._topic_queue)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        """Topics with queue data on a broker name of ``cluster`` (empty for an unknown cluster)."""
        names = self._clusters.get(cluster, set())
        return sorted(topic for topic, qmap in self._topic_queue.items() if not names.isdisjoint(qmap))

    def system_topic_list(self) -> TopicList:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster and broker names (brokers create topics named
        after both), plus one broker address to ask for the broker-side list."""
        topics: list[str] = []
        for cluster, names in sorted(self._clusters.items()):
            topics.append(cluster)
            topics.extend(sorted(names))
        broker_addr = None
        for name in sorted(self._groups):
            addrs = self._groups[name].addrs
            if addrs:
                broker_addr = addrs[min(addrs)]
                break
        return TopicList(tuple(topics), broker_addr)

    def _topics_by_sys_flag(self, wanted: Any) -> list[str]:
        out = []
        for topic, qmap in sorted(self._topic_queue.items()):
            if qmap and wanted(qmap[min(qmap)].topic_sys_flag):
                out.append(topic)
        return out

    def unit_topics(self) -> list[str]:
        return self._topics_by_sys_flag(lambda f: bool(f & TOPIC_SYS_FLAG_UNIT))

    def has_unit_sub_topics(self) -> list[str]:
        return self._topics_by_sys_flag(lambda f: bool(f & TOPIC_SYS_FLAG_UNIT_SUB))

    def has_unit_sub_ununit_topics(self) -> list[str]:
        return self._topics_by_sys_flag(
            lambda f: not f & TOPIC_SYS_FLAG_UNIT and bool(f & TOPIC_SYS_FLAG_UNIT_SUB)
        )

    # -- KV config ----------------------------------------------------------------------------

    def put_kv(self, namespace: str, key: str, value: str) -> None:
        self._kv.setdefault(namespace, {})[key] = value

    def get_kv(self, namespace: str, key: str) -> str | None:
        return self._kv.get(namespace, {}).get(key)

    def delete_kv(self, namespace: str, key: str) -> bool:
        """Remove one entry; the namespace stays, possibly empty (as in Java)."""
        table = self._kv.get(namespace)
        return table is not None and table.pop(key, None) is not None

    def kv_namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace, or None if it was never created."""
        table = self._kv.get(namespace)
        return dict(table) if table is not None else None

    def kv_config_table(self) -> dict[str, dict[str, str]]:
        """A copy of every namespace (``KVConfigSerializeWrapper.configTable``)."""
        return {ns: dict(table) for ns, table in self._kv.items()}

    def load_kv_config(self, table: Mapping[str, Mapping[str, str]]) -> None:
        """Merge a saved ``configTable`` into the KV tables."""
        for ns, entries in table.items():
            self._kv.setdefault(ns, {}).update(entries)


def _with_perm(qd: QueueData, perm: int) -> QueueData:
    return QueueData(qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, perm, qd.topic_sys_flag)


__all__ = [
    "DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS",
    "BrokerLiveInfo",
    "Displacement",
    "RegisterBrokerResult",
    "RemovedBroker",
    "RouteTable",
]

"""Route and registration bodies (name server, brokers, clients): values with the exact JSON
RocketMQ writes and a tolerant reader (pure). ``TopicConfig`` is in :mod:`rocketq.protocol.topic`;
the JSON writer and readers in :mod:`rocketq.protocol.fastjson`.

The documents (spec/remoting.md §3.1–§3.4), keys in the order fastjson writes bean properties
(alphabetical), ``null`` properties left out::

    TopicRouteData   {"brokerDatas":[BrokerData…],"filterServerTable":{addr:[…]},
                      "orderTopicConf":"a:4;b:4"?,"queueDatas":[QueueData…],
                      "topicQueueMappingByBroker":{…}?}
    QueueData        {"brokerName":…,"perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}
    BrokerData       {"brokerAddrs":{"0":"ip:port",…},"brokerName":…,"cluster":…,
                      "enableActingMaster":false,"zoneName":…?}
    ClusterInfo      {"brokerAddrTable":{brokerName:BrokerData},"clusterAddrTable":{cluster:[brokerName…]}}
    TopicList        {"brokerAddr":…?,"topicList":[…]}
    KVTable          {"table":{k:v}}
    DataVersion      {"counter":N,"stateVersion":0,"timestamp":ms}
    RegisterBrokerBody
                     {"filterServerList":[…],"topicConfigSerializeWrapper":{"dataVersion":…,
                      "mappingDataVersion":…,"topicConfigTable":{name:TopicConfig},
                      "topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}}
    TopicConfig      {"attributes":{},"order":false,"perm":6,"readQueueNums":16,
                      "topicFilterType":"SINGLE_TAG","topicName":…,"topicSysFlag":0,"writeQueueNums":16}

Two spellings of ``brokerAddrs`` (a ``Map<Long,String>``): fastjson's default writes the keys
unquoted (``{0:"…"}``, not JSON), its "standard" mode quotes them. Route data is written quoted
(the spec's recommendation: every client parses it, ali-ons and Python's ``json`` included);
ClusterInfo is written unquoted by default, as the Java name server always does (Java admin tools
read it with fastjson). Every reader here accepts both, and map keys come back as ints.

Readers are lenient the way fastjson is: unknown keys are ignored, missing properties take the
Java field defaults, numbers may arrive as strings, enums by name or ordinal, and the pre-4.8
spelling ``topicSynFlag`` is read too. A body that is not a JSON object of the right shape raises
:class:`~rocketq.errors.BodyFormatError`.

REGISTER_BROKER bodies come in three forms, all read by :meth:`RegisterBrokerBody.decode`: the
JSON above; a bare ``TopicConfigSerializeWrapper`` (brokers before V3_0_11); and the zlib stream
of ``compressedRegister=true`` brokers (recognised by its first byte, since 5.x brokers send it
with the header flag ``compressed=false``)::

    i32 len, DataVersion JSON | i32 topicCount, (i32 len, "name read write perm filterType [attrsJson]")*
    | i32 len, filterServerList JSON | [≥ V5_0_0: i32 count, (i32 len, TopicQueueMappingInfo JSON)*]

The compact topic form carries neither ``topicSysFlag`` nor ``order``; they read back as 0/false.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rocketq.errors import BodyFormatError
from rocketq.protocol.fastjson import (
    dumps_sorted,
    field_bool,
    field_int,
    field_object,
    field_str,
    field_str_list,
    loads_body,
    require_object,
)
from rocketq.protocol.topic import TopicConfig

#: brokerId of a master (MixAll.MASTER_ID).
MASTER_ID: Final = 0
#: REGISTER_BROKER's field, rocketq's own, for the DLedger term a broker of a DLedger group
#: registers in: the name server lets a broker registering as master in a higher term take over
#: from a live master of an older term (Apache RocketMQ's name server ignores the field).
DLEDGER_TERM_FIELD: Final = "dLegerTerm"
#: KV namespace whose entries are ``orderTopicConf`` strings per topic (NamesrvUtil).
NAMESPACE_ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"

#: Largest inflated size accepted from a compressed REGISTER_BROKER body.
MAX_INFLATED_REGISTER_BODY_BYTES: Final = 64 * 1024 * 1024

_I32: Final = struct.Struct(">i")


def _broker_id(key: Any, what: str) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        raise BodyFormatError(f"{what}: broker id {key!r:.40} is not an integer") from None


# ---------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class DataVersion:
    """A broker's topic-config version (``DataVersion.java``). Equal versions (all three fields)
    mean "topic configs unchanged"."""

    counter: int = 0
    timestamp_ms: int = 0
    state_version: int = 0

    def next_version(self, now_ms: int, state_version: int = 0) -> DataVersion:
        """The version after a change (counter + 1, timestamp now), as ``nextVersion`` does."""
        return DataVersion(self.counter + 1, now_ms, state_version)

    def to_json_obj(self) -> dict[str, Any]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp_ms}

    @classmethod
    def from_json_obj(cls, obj: Any, what: str = "DataVersion") -> DataVersion:
        if obj is None:
            return cls()
        o = require_object(obj, what)
        return cls(
            counter=field_int(o, "counter", 0, what),
            timestamp_ms=field_int(o, "timestamp", 0, what),
            state_version=field_int(o, "stateVersion", 0, what),
        )

    def encode(self) -> bytes:
        return dumps_sorted(self.to_json_obj()).encode()

    @classmethod
    def decode(cls, data: bytes) -> DataVersion:
        return cls.from_json_obj(loads_body(data, "DataVersion"))


@dataclass(frozen=True, slots=True)
class QueueData:
    """One broker name's queues of a topic (``QueueData.java``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json_obj(cls, obj: Any, what: str = "QueueData") -> QueueData:
        o = require_object(obj, what)
        name = field_str(o, "brokerName")
        if not name:
            raise BodyFormatError(f"{what}: no brokerName")
        flag_key = "topicSysFlag" if "topicSysFlag" in o else "topicSynFlag"
        return cls(
            broker_name=name,
            read_queue_nums=field_int(o, "readQueueNums", 0, what),
            write_queue_nums=field_int(o, "writeQueueNums", 0, what),
            perm=field_int(o, "perm", 0, what),
            topic_sys_flag=field_int(o, flag_key, 0, what),
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker name: its cluster and the address of each member (``BrokerData.java``);
    ``broker_addrs[0]`` is the master."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str] = field(default_factory=dict, hash=False)
    zone_name: str | None = None
    enable_acting_master: bool = False

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def to_json_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "brokerAddrs": dict(self.broker_addrs),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": self.enable_acting_master,
        }
        if self.zone_name is not None:
            obj["zoneName"] = self.zone_name
        return obj

    @classmethod
    def from_json_obj(cls, obj: Any, what: str = "BrokerData") -> BrokerData:
        o = require_object(obj, what)
        addrs = {
            _broker_id(k, what): str(v)
            for k, v in field_object(o, "brokerAddrs", what).items()
            if v is not None
        }
        return cls(
            cluster=field_str(o, "cluster", "") or "",
            broker_name=field_str(o, "brokerName", "") or "",
            broker_addrs=addrs,
            zone_name=field_str(o, "zoneName"),
            enable_acting_master=field_bool(o, "enableActingMaster", False),
        )


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC's answer (``TopicRouteData.java``)."""

    queue_datas: tuple[QueueData, ...] = ()
    broker_datas: tuple[BrokerData, ...] = ()
    filter_server_table: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    order_topic_conf: str | None = None
    #: Static-topic mappings ``{brokerName: TopicQueueMappingInfo JSON}``, passed through as read.
    topic_queue_mapping_by_broker: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_json_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "brokerDatas": [b.to_json_obj() for b in self.broker_datas],
            "filterServerTable": {addr: list(servers) for addr, servers in self.filter_server_table.items()},
            "queueDatas": [q.to_json_obj() for q in self.queue_datas],
        }
        if self.order_topic_conf is not None:
            obj["orderTopicConf"] = self.order_topic_conf
        if self.topic_queue_mapping_by_broker is not None:
            obj["topicQueueMappingByBroker"] = dict(self.topic_queue_mapping_by_broker)
        return obj

    def encode(self, *, standard_json: bool = True) -> bytes:
        """The route body. ``standard_json`` (default) is the Java name server's answer to
        clients ≥ V4_9_4: quoted ``brokerAddrs`` keys, ASCII-only; False gives fastjson's default
        (bare keys, UTF-8), what it answers older clients."""
        text = dumps_sorted(
            self.to_json_obj(), quote_int_keys=standard_json, browser_compatible=standard_json
        )
        return text.encode()

    @classmethod
    def from_json_obj(cls, obj: Any, what: str = "TopicRouteData") -> TopicRouteData:
        o = require_object(obj, what)
        queue_datas = o.get("queueDatas")
        broker_datas = o.get("brokerDatas")
        queue_datas = [] if queue_datas is None else queue_datas
        broker_datas = [] if broker_datas is None else broker_datas
        if not isinstance(queue_datas, list) or not isinstance(broker_datas, list):
            raise BodyFormatError(f"{what}: queueDatas/brokerDatas are not lists")
        filters = {
            str(addr): tuple(str(s) for s in servers)
            for addr, servers in field_object(o, "filterServerTable", what).items()
            if isinstance(servers, list)
        }
        mapping = o.get("topicQueueMappingByBroker")
        return cls(
            queue_datas=tuple(QueueData.from_json_obj(q, f"{what}.queueDatas[]") for q in queue_datas),
            broker_datas=tuple(BrokerData.from_json_obj(b, f"{what}.brokerDatas[]") for b in broker_datas),
            filter_server_table=filters,
            order_topic_conf=field_str(o, "orderTopicConf"),
            topic_queue_mapping_by_broker=require_object(mapping, what) if mapping is not None else None,
        )

    @classmethod
    def decode(cls, data: bytes) -> TopicRouteData:
        return cls.from_json_obj(loads_body(data, "TopicRouteData"))


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO's answer (``ClusterInfo.java``)."""

    broker_addr_table: Mapping[str, BrokerData] = field(default_factory=dict, hash=False)
    cluster_addr_table: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: b.to_json_obj() for name, b in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    def encode(self, *, standard_json: bool = False) -> bytes:
        """fastjson's default form (bare ``brokerAddrs`` keys), as the Java name server always
        writes it; ``standard_json=True`` quotes them."""
        return dumps_sorted(self.to_json_obj(), quote_int_keys=standard_json).encode()

    @classmethod
    def decode(cls, data: bytes) -> ClusterInfo:
        what = "ClusterInfo"
        o = require_object(loads_body(data, what), what)
        brokers = {
            str(name): BrokerData.from_json_obj(b, f"{what}.brokerAddrTable[{name!r}]")
            for name, b in field_object(o, "brokerAddrTable", what).items()
        }
        clusters: dict[str, tuple[str, ...]] = {}
        for cluster, names in field_object(o, "clusterAddrTable", what).items():
            if not isinstance(names, list):
                raise BodyFormatError(f"{what}.clusterAddrTable[{cluster!r}] is not a list")
            clusters[str(cluster)] = tuple(str(n) for n in names)
        return cls(brokers, clusters)


@dataclass(frozen=True, slots=True)
class TopicList:
    """``TopicList.java``: topic names, plus a broker address for the system-topic list."""

    topic_list: tuple[str, ...] = ()
    broker_addr: str | None = None

    def to_json_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"topicList": list(self.topic_list)}
        if self.broker_addr is not None:
            obj["brokerAddr"] = self.broker_addr
        return obj

    def encode(self) -> bytes:
        return dumps_sorted(self.to_json_obj()).encode()

    @classmethod
    def decode(cls, data: bytes) -> TopicList:
        what = "TopicList"
        o = require_object(loads_body(data, what), what)
        return cls(field_str_list(o, "topicList", what), field_str(o, "brokerAddr"))


@dataclass(frozen=True, slots=True)
class KVTable:
    """``KVTable.java``: one KV namespace."""

    table: Mapping[str, str] = field(default_factory=dict, hash=False)

    def encode(self) -> bytes:
        return dumps_sorted({"table": dict(self.table)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> KVTable:
        what = "KVTable"
        o = require_object(loads_body(data, what), what)
        return cls({str(k): str(v) for k, v in field_object(o, "table", what).items() if v is not None})


@dataclass(frozen=True, slots=True)
class RegisterBrokerBody:
    """REGISTER_BROKER's body: the broker's topic configs, their version, its filter servers, and
    (5.x) static-topic mapping documents passed through as read."""

    topic_config_table: Mapping[str, TopicConfig] = field(default_factory=dict, hash=False)
    data_version: DataVersion = field(default_factory=DataVersion)
    filter_server_list: tuple[str, ...] = ()
    topic_queue_mapping_info_map: Mapping[str, Any] = field(default_factory=dict, hash=False)
    topic_queue_mapping_detail_map: Mapping[str, Any] = field(default_factory=dict, hash=False)
    mapping_data_version: DataVersion = field(default_factory=DataVersion)

    @classmethod
    def of(
        cls, topics: Iterable[TopicConfig], data_version: DataVersion, filter_servers: Iterable[str] = ()
    ) -> RegisterBrokerBody:
        return cls({t.topic_name: t for t in topics}, data_version, tuple(filter_servers))

    def to_json_obj(self) -> dict[str, Any]:
        return {
            "filterServerList": list(self.filter_server_list),
            "topicConfigSerializeWrapper": {
                "dataVersion": self.data_version.to_json_obj(),
                "mappingDataVersion": self.mapping_data_version.to_json_obj(),
                "topicConfigTable": {name: tc.to_json() for name, tc in self.topic_config_table.items()},
                "topicQueueMappingDetailMap": dict(self.topic_queue_mapping_detail_map),
                "topicQueueMappingInfoMap": dict(self.topic_queue_mapping_info_map),
            },
        }

    def encode(self, *, compressed: bool = False) -> bytes:
        """The JSON body a 5.x broker sends, or with ``compressed`` the zlib form of
        ``compressedRegister=true`` (mapping section included, as brokers ≥ V5_0_0 write it)."""
        if not compressed:
            return dumps_sorted(self.to_json_obj()).encode()
        parts: list[bytes] = []

        def put(chunk: bytes) -> None:
            parts.append(_I32.pack(len(chunk)))
            parts.append(chunk)

        put(self.data_version.encode())
        parts.append(_I32.pack(len(self.topic_config_table)))
        for tc in self.topic_config_table.values():
            put(tc.encode_compact().encode())
        put(dumps_sorted(list(self.filter_server_list)).encode())
        parts.append(_I32.pack(len(self.topic_queue_mapping_info_map)))
        for info in self.topic_queue_mapping_info_map.values():
            put(dumps_sorted(info).encode())
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, data: bytes) -> RegisterBrokerBody:
        """Read any of the three forms (module docstring); an empty body is an empty
        registration with DataVersion 0/0/0, as in Java."""
        if not data:
            return cls()
        if data[:1] == b"x":  # a zlib stream; JSON starts with '{' or whitespace
            return cls._decode_compressed(data)
        what = "RegisterBrokerBody"
        o = require_object(loads_body(data, what), what)
        if "topicConfigSerializeWrapper" in o:
            wrapper = field_object(o, "topicConfigSerializeWrapper", what)
            filters = field_str_list(o, "filterServerList", what)
        elif "topicConfigTable" in o or "dataVersion" in o:
            wrapper, filters = o, ()
        else:
            wrapper, filters = {}, field_str_list(o, "filterServerList", what)
        wwhat = f"{what}.topicConfigSerializeWrapper"
        table = {
            str(name): TopicConfig.from_json_obj(tc, str(name), f"{wwhat}.topicConfigTable[{name!r}]")
            for name, tc in field_object(wrapper, "topicConfigTable", wwhat).items()
            if tc is not None
        }
        return cls(
            topic_config_table=table,
            data_version=DataVersion.from_json_obj(wrapper.get("dataVersion"), f"{wwhat}.dataVersion"),
            filter_server_list=filters,
            topic_queue_mapping_info_map=field_object(wrapper, "topicQueueMappingInfoMap", wwhat),
            topic_queue_mapping_detail_map=field_object(wrapper, "topicQueueMappingDetailMap", wwhat),
            mapping_data_version=DataVersion.from_json_obj(
                wrapper.get("mappingDataVersion"), f"{wwhat}.mappingDataVersion"
            ),
        )

    @classmethod
    def _decode_compressed(cls, data: bytes) -> RegisterBrokerBody:
        what = "compressed RegisterBrokerBody"
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(data, MAX_INFLATED_REGISTER_BODY_BYTES)
        except zlib.error as exc:
            raise BodyFormatError(f"{what} ({len(data)} B) does not inflate: {exc}") from None
        if inflater.unconsumed_tail:
            raise BodyFormatError(f"{what} inflates beyond {MAX_INFLATED_REGISTER_BODY_BYTES} B")
        pos = 0

        def read_int() -> int:
            nonlocal pos
            if pos + 4 > len(raw):
                raise BodyFormatError(f"{what} ends inside a length field at byte {pos} of {len(raw)}")
            (value,) = _I32.unpack_from(raw, pos)
            pos += 4
            return int(value)

        def read_chunk() -> bytes:
            nonlocal pos
            size = read_int()
            if size < 0 or pos + size > len(raw):
                raise BodyFormatError(
                    f"{what}: chunk of {size} B at byte {pos} exceeds the {len(raw)} B body"
                )
            chunk = raw[pos : pos + size]
            pos += size
            return chunk

        data_version = DataVersion.decode(read_chunk())
        table: dict[str, TopicConfig] = {}
        for _ in range(read_int()):
            tc = TopicConfig.decode_compact(read_chunk().decode("utf-8", "replace"))
            table[tc.topic_name] = tc
        filters_json = loads_body(read_chunk(), f"{what} filterServerList")
        filters = tuple(str(f) for f in filters_json) if isinstance(filters_json, list) else ()
        mapping: dict[str, Any] = {}
        if pos < len(raw):  # brokers >= V5_0_0 append the static-topic mappings
            for _ in range(read_int()):
                info = require_object(loads_body(read_chunk(), f"{what} TopicQueueMappingInfo"), what)
                mapping[str(info.get("topic"))] = info
        return cls(table, data_version, filters, mapping)


__all__ = [
    "MASTER_ID",
    "MAX_INFLATED_REGISTER_BODY_BYTES",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "BrokerData",
    "ClusterInfo",
    "DataVersion",
    "KVTable",
    "QueueData",
    "RegisterBrokerBody",
    "TopicList",
    "TopicRouteData",
]

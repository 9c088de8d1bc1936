"""The name server: request processors over a :class:`~rocketq.namesrv.routes.RouteTable`.

I/O edge of the name server. :class:`NameServer` owns a
:class:`~rocketq.remoting.RemotingServer`, one route table, a periodic task that expires silent
brokers, and (optionally) the KV config file. Every request is handled on the event loop without
blocking: the table is pure and in memory, the KV file is written on a worker thread.

Request codes (spec/remoting.md §2.2), answers as the Java name server gives them::

    100 PUT_KV_CONFIG            namespace*, key*, value*           → 0 (1 "namespace or key is null")
    101 GET_KV_CONFIG            namespace*, key*                   → 0 + header value | 22
    102 DELETE_KV_CONFIG         namespace*, key*                   → 0
    103 REGISTER_BROKER          RegisterBrokerRequestHeader + body → 0 + haServerAddr/masterAddr,
                                 body KVTable of ORDER_TOPIC_CONFIG | 1 "crc32 not match"
    104 UNREGISTER_BROKER        clusterName*, brokerAddr*, brokerName*, brokerId* → 0
    105 GET_ROUTEINFO_BY_TOPIC   topic*                             → 0 + TopicRouteData | 17
    106 GET_BROKER_CLUSTER_INFO                                     → 0 + ClusterInfo (bare int keys)
    205 / 327 WIPE_ / ADD_WRITE_PERM_OF_BROKER  brokerName*         → 0 + wipeTopicCount / addTopicCount
    206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER                          → 0 + TopicList | 1 "disable"
    216 DELETE_TOPIC_IN_NAMESRV  topic*, clusterName                → 0
    217 REGISTER_TOPIC_IN_NAMESRV topic*, body TopicRouteData       → 0
    219 GET_KVLIST_BY_NAMESPACE  namespace*                         → 0 + KVTable | 22
    224 GET_TOPICS_BY_CLUSTER    cluster*                           → 0 + TopicList | 1 "disable"
    304 GET_SYSTEM_TOPIC_LIST_FROM_NS                               → 0 + TopicList (+brokerAddr)
    311/312/313 unit topic lists                                    → 0 + TopicList | 1 "disable"
    318 / 319 UPDATE_ / GET_NAMESRV_CONFIG  Java properties text    → 0 | 16 (black-listed key)
    322 QUERY_DATA_VERSION       clusterName*, brokerAddr*, body DataVersion → 0 + changed, body DataVersion
    904 BROKER_HEARTBEAT         clusterName*, brokerAddr*          → 0
    anything else                                                   → 3 " request type <code> not supported"

A missing required header field answers 1 (SYSTEM_ERROR) naming the field; a body that does not
parse answers 1 too. Route data is always written in standard JSON (quoted ``brokerAddrs`` keys,
ASCII) whatever the client's version: every client reads it (spec §1.7 recommendation).

Broker liveness: a broker is removed when silent for its ``heartbeatTimeoutMillis`` (default
120 s; checked every ``scan_not_active_broker_interval_ms``), or at once when the connection it
registered on closes, as RocketMQ does; an expired broker's connection is closed. Liveness uses
a monotonic clock (RocketMQ uses the wall clock, which a clock step can fool).

Access control: with ``aclEnable=true`` (``plain_acl.yml``, ``aclFile``) the codes that change
routes, KV or config (:data:`rocketq.acl.plain.NAMESRV_PROTECTED_CODES`) need a request signed
by an ``admin: true`` account (or a globally white-listed address), else NO_PERMISSION (16).
With ACL on or off, an (un)registration that would displace a live broker (the same brokerName
and brokerId live at another address, or the same address live on another connection) is
refused unless it passed the ACL check or comes from the host its brokerAddr names.

Not done (Java has it): ``needWaitForService`` start-up delay, acting-master route rewriting
(``supportActingMaster``, off by default in Java), min-broker-id change notifications,
controller mode, persisting UPDATE_NAMESRV_CONFIG changes to a properties file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from rocketq.acl.address import host_of
from rocketq.acl.plain import (
    NAMESRV_PROTECTED_CODES,
    PlainAclValidator,
    RateLimitedLog,
    resolve_acl_file,
)
from rocketq.config import field_for_rocketmq_key
from rocketq.errors import ResponseCode
from rocketq.namesrv.config import DEFAULT_NAMESRV_PORT, NamesrvConfig, rocketmq_key
from rocketq.namesrv.header_fields import bool_field as _bool_field
from rocketq.namesrv.header_fields import field as _field
from rocketq.namesrv.header_fields import int_field as _int_field
from rocketq.namesrv.header_fields import term_field as _term_field
from rocketq.namesrv.routes import RemovedBroker, RouteTable
from rocketq.properties import parse_properties
from rocketq.protocol import fastjson
from rocketq.protocol.fastjson import dumps_sorted as dumps
from rocketq.protocol.route import (
    NAMESPACE_ORDER_TOPIC_CONFIG,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicList,
    TopicRouteData,
)
from rocketq.remoting import (
    Connection,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    create_response,
)
from rocketq.remoting.codes import REQUEST_CODE_NOT_SUPPORTED_REMARK
from rocketq.tasks import cancel_and_wait

if TYPE_CHECKING:
    from rocketq.metrics.exposition import Family
    from rocketq.metrics.http import MetricsServer
    from rocketq.namesrv.metrics import NamesrvMetrics

log = logging.getLogger(__name__)

#: Remark suffix Java appends to TOPIC_NOT_EXIST (``FAQUrl.suggestTodo(APPLY_TOPIC_URL)``).
FAQ_SUFFIX: Final = "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
#: extFields key of a 5.x broker's zone (``MixAll.ZONE_NAME``).
ZONE_NAME_FIELD: Final = "__ZONE_NAME"
#: Config keys UPDATE_NAMESRV_CONFIG refuses (Java's black list, plus what cannot change live).
_JAVA_BLACK_LIST: Final = ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome")
CONFIG_BLACK_LIST: Final = frozenset((*_JAVA_BLACK_LIST, "listenPort", "bindAddress", "aclEnable", "aclFile"))


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


Processor = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]


class NameServer:
    """A RocketMQ name server on ``config.bind_address:config.listen_port``.

    ``await start()`` binds (port 0 picks a free port: read :attr:`port`), ``await close()``
    stops; also an async context manager. :attr:`routes` is the live route table."""

    def __init__(
        self,
        config: NamesrvConfig | None = None,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._config = config or NamesrvConfig()
        self._clock_ms = clock_ms or _monotonic_ms
        self.routes = RouteTable()
        self._server = RemotingServer(
            self._config.bind_address,
            self._config.listen_port,
            self._handle,
            max_frame_size=self._config.max_frame_size_bytes,
            on_connection=self._on_connection,
            ssl=self._config.tls.server_context() if self._config.tls is not None else None,
            tls_permissive=self._config.tls is not None and self._config.tls.server_mode == "permissive",
            limits=self._config.server_limits(),
        )
        self._scan_task: asyncio.Task[None] | None = None
        self._kv_lock: asyncio.Lock | None = None
        self._started = False
        #: The plain ACL rules when ``acl_enable`` (loaded by start).
        self.acl: PlainAclValidator | None = None
        self._refusal_log = RateLimitedLog(log)
        self._processors: dict[int, Processor] = {
            RequestCode.PUT_KV_CONFIG: self._put_kv_config,
            RequestCode.GET_KV_CONFIG: self._get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv_config,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._get_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._get_all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: self._register_topic,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._get_kv_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self._get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self._get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self._get_unit_topics,
            RequestCode.UPDATE_NAMESRV_CONFIG: self._update_config,
            RequestCode.GET_NAMESRV_CONFIG: self._get_config,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.BROKER_HEARTBEAT: self._broker_heartbeat,
        }
        self.metrics: NamesrvMetrics | None = None
        self._metrics_server: MetricsServer | None = None
        if self._config.metrics_enabled:
            self.count_metrics()

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def config(self) -> NamesrvConfig:
        return self._config

    @property
    def port(self) -> int:
        """The listening port (the real one once started with port 0)."""
        return self._server.port

    @property
    def address(self) -> str:
        return self._server.address

    async def start(self) -> None:
        if self._started:
            return
        self._kv_lock = asyncio.Lock()
        if self._config.acl_enable:
            self.acl = await asyncio.to_thread(PlainAclValidator, resolve_acl_file(self._config.acl_file))
            log.info("ACL enabled for registrations and KV/config writes: %s", self.acl.path)
        path = self._config.kv_config_path
        if path:
            saved = await asyncio.to_thread(fastjson.load_file, path)
            if isinstance(saved, dict) and isinstance(saved.get("configTable"), dict):
                table = {
                    str(ns): {str(k): str(v) for k, v in entries.items() if v is not None}
                    for ns, entries in saved["configTable"].items()
                    if isinstance(entries, dict)
                }
                self.routes.load_kv_config(table)
                log.info("loaded KV config from %s (%d namespaces)", path, len(table))
        await self._server.start()
        if self._config.metrics_enabled:
            await self._serve_metrics()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop())
        self._started = True
        log.info("name server listening on %s", self.address)

    # -- metrics (docs/metrics.md) ------------------------------------------------------------

    def count_metrics(self) -> NamesrvMetrics:
        """Start counting requests (once); ``rocketq serve`` serves the result on its broker's
        ``/metrics`` through :meth:`metric_families`."""
        if self.metrics is None:
            from rocketq.namesrv.metrics import NamesrvMetrics  # noqa: PLC0415 - only with metrics

            self.metrics = NamesrvMetrics(f"{self._config.bind_address}:{self._config.listen_port}")
            self.metrics.instrument(self._processors)
        return self.metrics

    async def metric_families(self) -> list[Family]:
        metrics = self.count_metrics()
        metrics.base = (("node_type", "nameserver"), ("node_id", self.address))
        return metrics.families(self.routes)

    @property
    def metrics_url(self) -> str | None:
        return self._metrics_server.url if self._metrics_server is not None else None

    async def _serve_metrics(self) -> None:
        from rocketq.namesrv.metrics import serve_metrics  # noqa: PLC0415 - only with metrics on

        self._metrics_server = await serve_metrics(self._config, self.metric_families, self._server)

    async def close(self) -> None:
        if not self._started:
            await self._server.close()  # a start cancelled part-way may have left it listening
            return
        self._started = False
        metrics_server, self._metrics_server = self._metrics_server, None
        if metrics_server is not None:
            await metrics_server.close()
        task, self._scan_task = self._scan_task, None
        await cancel_and_wait(task)
        await self._server.close()
        log.info("name server on %s closed", self.address)

    async def __aenter__(self) -> NameServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def scan_now(self) -> list[RemovedBroker]:
        """Expire silent brokers now (what the periodic task does); closes their connections."""
        removed = self.routes.scan_expired(self._clock_ms())
        for broker in removed:
            channel = broker.channel
            if isinstance(channel, Connection) and not channel.closed:
                channel.close()
        return removed

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.scan_not_active_broker_interval_ms / 1000)
            try:
                self.scan_now()
            except Exception:
                log.exception("scanning for expired brokers failed")

    def _on_connection(self, conn: Connection) -> None:
        conn.add_close_callback(self._on_connection_closed)

    def _on_connection_closed(self, conn: Connection) -> None:
        self.routes.on_channel_closed(conn)

    async def _persist_kv(self) -> None:
        path = self._config.kv_config_path
        if not path or self._kv_lock is None:
            return
        async with self._kv_lock:  # snapshot inside the lock: the last write holds the newest state
            text = dumps({"configTable": self.routes.kv_config_table()})
            try:
                await asyncio.to_thread(fastjson.persist, path, text)
            except OSError:
                log.exception("persisting KV config to %s failed", path)

    # -- dispatch -----------------------------------------------------------------------------

    async def _handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        processor = self._processors.get(request.code)
        if processor is None:
            return create_response(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                REQUEST_CODE_NOT_SUPPORTED_REMARK.format(code=request.code),
            )
        if self.acl is not None and request.code in NAMESRV_PROTECTED_CODES:
            refused = self.acl.refusal(
                request, conn.remote_address, self._refusal_log, NAMESRV_PROTECTED_CODES, strict_admin=True
            )
            if refused is not None:
                return refused
        return await processor(conn, request)

    def _displacement(
        self, conn: Connection, request: RemotingCommand, cluster: str, name: str, addr: str, broker_id: int
    ) -> RemotingCommand | None:
        """NO_PERMISSION when this (un)registration would displace a live broker, else None."""
        if self.acl is not None:
            return None  # it passed the ACL check: an admin account or a white-listed address
        term = _term_field(request)
        found = self.routes.displacement(cluster, name, addr, broker_id, conn, self._clock_ms(), term)
        if found is None or (found.other_connection and host_of(addr) == host_of(conn.remote_address)):
            return None  # free, or the broker itself reconnected before its old connection was seen closed
        reason = (
            f"{found.reason}; refusing the request from {conn.remote_address} (only an admin account may)"
        )
        self._refusal_log.warning(reason, conn.remote_address)
        return create_response(request, ResponseCode.NO_PERMISSION, reason)

    # -- KV config ----------------------------------------------------------------------------

    async def _put_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = request.ext_fields.get("namespace")
        key = request.ext_fields.get("key")
        if namespace is None or key is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "namespace or key is null")
        self.routes.put_kv(namespace, key, _field(request, "value"))
        await self._persist_kv()
        return create_response(request, ResponseCode.SUCCESS)

    async def _get_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace, key = _field(request, "namespace"), _field(request, "key")
        value = self.routes.get_kv(namespace, key)
        if value is None:
            return create_response(
                request, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}"
            )
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"value": value})

    async def _delete_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if self.routes.delete_kv(_field(request, "namespace"), _field(request, "key")):
            await self._persist_kv()
        return create_response(request, ResponseCode.SUCCESS)

    async def _get_kv_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = _field(request, "namespace")
        table = self.routes.kv_namespace(namespace)
        if table is None:
            return create_response(
                request, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}"
            )
        return create_response(request, ResponseCode.SUCCESS, body=KVTable(table).encode())

    # -- brokers ------------------------------------------------------------------------------

    async def _register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        crc = _int_field(request, "bodyCrc32", 0)
        if crc != 0 and zlib.crc32(request.body) & 0x7FFFFFFF != crc:
            log.warning(
                "REGISTER_BROKER from %s: body crc32 does not match header %d", conn.remote_address, crc
            )
            return create_response(request, ResponseCode.SYSTEM_ERROR, "crc32 not match")
        cluster = _field(request, "clusterName")
        broker_name = _field(request, "brokerName")
        broker_addr = _field(request, "brokerAddr")
        broker_id = _int_field(request, "brokerId")
        refused = self._displacement(conn, request, cluster, broker_name, broker_addr, broker_id)
        if refused is not None:
            return refused
        timeout_ms = _int_field(request, "heartbeatTimeoutMillis", self._config.broker_heartbeat_timeout_ms)
        body = RegisterBrokerBody.decode(request.body)
        result = self.routes.register_broker(
            cluster,
            broker_name,
            broker_addr,
            broker_id,
            request.ext_fields.get("haServerAddr"),
            body.topic_config_table,
            body.data_version,
            self._clock_ms(),
            timeout_ms,
            body.filter_server_list,
            enable_acting_master=_bool_field(request, "enableActingMaster"),
            zone_name=request.ext_fields.get(ZONE_NAME_FIELD),
            channel=conn,
            delete_missing_topics=self._config.delete_topic_with_broker_registration,
            topic_queue_mapping_info=body.topic_queue_mapping_info_map,
            term=_term_field(request),
        )
        reply_body = b""
        if self._config.return_order_topic_config_to_broker:
            order_conf = self.routes.kv_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
            if order_conf is not None:
                reply_body = KVTable(order_conf).encode()
        return create_response(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr},
            body=reply_body,
        )

    async def _unregister_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        cluster = _field(request, "clusterName")
        broker_addr = _field(request, "brokerAddr")
        broker_name = _field(request, "brokerName")
        broker_id = _int_field(request, "brokerId")
        refused = self._displacement(conn, request, cluster, broker_name, broker_addr, broker_id)
        if refused is not None:
            return refused
        if self.routes.unregister_broker(cluster, broker_addr, broker_name, broker_id):
            log.info(
                "broker %s/%d at %s (cluster %s) unregistered", broker_name, broker_id, broker_addr, cluster
            )
        return create_response(request, ResponseCode.SUCCESS)

    async def _query_data_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        cluster = _field(request, "clusterName")
        broker_addr = _field(request, "brokerAddr")
        version = DataVersion.decode(request.body) if request.body else None
        changed, stored = self.routes.query_data_version(cluster, broker_addr, version, self._clock_ms())
        return create_response(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"changed": changed},
            body=stored.encode() if stored is not None else b"",
        )

    async def _broker_heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        self.routes.touch_broker(
            _field(request, "clusterName"), _field(request, "brokerAddr"), self._clock_ms()
        )
        return create_response(request, ResponseCode.SUCCESS)

    async def _wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._change_write_perm(conn, request, self.routes.wipe_write_perm, "wiped", "wipeTopicCount")

    async def _add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._change_write_perm(conn, request, self.routes.add_write_perm, "added", "addTopicCount")

    def _change_write_perm(
        self,
        conn: Connection,
        request: RemotingCommand,
        change: Callable[[str], int],
        done: str,
        count_field: str,
    ) -> RemotingCommand:
        """``change(brokerName)`` on the table; the answer carries its topic count in ``count_field``."""
        broker_name = _field(request, "brokerName")
        count = change(broker_name)
        log.info(
            "%s write perm of broker %s on %d topics (asked by %s)",
            done,
            broker_name,
            count,
            conn.remote_address,
        )
        return create_response(request, ResponseCode.SUCCESS, ext_fields={count_field: count})

    # -- routes and lists ---------------------------------------------------------------------

    async def _get_route_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = _field(request, "topic")
        route = self.routes.pick_topic_route(topic, with_order_topic_conf=self._config.order_message_enable)
        if route is None:
            return create_response(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}{FAQ_SUFFIX}",
            )
        return create_response(request, ResponseCode.SUCCESS, body=route.encode(standard_json=True))

    async def _get_cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.routes.cluster_info().encode())

    async def _get_all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not self._config.enable_all_topic_list:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "disable")
        return create_response(
            request, ResponseCode.SUCCESS, body=TopicList(tuple(self.routes.all_topics())).encode()
        )

    async def _get_topics_by_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not self._config.enable_topic_list:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "disable")
        topics = self.routes.topics_by_cluster(_field(request, "cluster"))
        return create_response(request, ResponseCode.SUCCESS, body=TopicList(tuple(topics)).encode())

    async def _get_system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.routes.system_topic_list().encode())

    async def _get_unit_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not self._config.enable_topic_list:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "disable")
        if request.code == RequestCode.GET_UNIT_TOPIC_LIST:
            topics = self.routes.unit_topics()
        elif request.code == RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST:
            topics = self.routes.has_unit_sub_topics()
        else:
            topics = self.routes.has_unit_sub_ununit_topics()
        return create_response(request, ResponseCode.SUCCESS, body=TopicList(tuple(topics)).encode())

    async def _delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = _field(request, "topic")
        cluster = request.ext_fields.get("clusterName") or None
        if self.routes.delete_topic(topic, cluster):
            log.info(
                "topic %s deleted from the name server%s", topic, f" for cluster {cluster}" if cluster else ""
            )
        return create_response(request, ResponseCode.SUCCESS)

    async def _register_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topic = _field(request, "topic")
        if request.body:
            route = TopicRouteData.decode(request.body)
            self.routes.register_topic(topic, route.queue_datas)
        return create_response(request, ResponseCode.SUCCESS)

    # -- own configuration --------------------------------------------------------------------

    async def _get_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        text = "".join(f"{k}={v}\n" for k, v in self._config.to_rocketmq_properties().items())
        return create_response(request, ResponseCode.SUCCESS, body=text.encode())

    async def _update_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            return create_response(request, ResponseCode.SUCCESS)
        props = parse_properties(request.body.decode("utf-8", "replace"))
        refused = sorted(CONFIG_BLACK_LIST.intersection(props))
        if refused:
            return create_response(
                request, ResponseCode.NO_PERMISSION, "Can not update config in black list."
            )
        named = {field_for_rocketmq_key(NamesrvConfig, key) for key in props}
        keep = {
            f.name: getattr(self._config, f.name)
            for f in dataclasses.fields(NamesrvConfig)
            if f.name not in named
        }
        self._config = NamesrvConfig.from_rocketmq_properties(props, **keep)  # ConfigError → 1 + message
        self._server.update_limits(self._config.server_limits())
        log.info("name server config updated by %s: %s", conn.remote_address, props)
        return create_response(request, ResponseCode.SUCCESS)


__all__ = [
    "CONFIG_BLACK_LIST",
    "DEFAULT_NAMESRV_PORT",
    "FAQ_SUFFIX",
    "NameServer",
    "NamesrvConfig",
    "parse_properties",
    "rocketmq_key",
]

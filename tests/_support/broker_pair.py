"""A name server and one broker, each in its own ``rocketq`` process under one root folder, with
one topic created and routed: the cluster of the ACL and the TLS end-to-end tests, which add their
own configuration keys and client settings."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping

from _support.procs import HOST, RocketqProcess, free_port, wait_until, write_broker_conf, write_conf
from rocketq.client import Admin, ConsumeStatus, PushConsumer
from rocketq.client.config import ClientConfig
from rocketq.errors import RocketqError

START_TIMEOUT_S = 30.0


def topic_routed(admin: Admin, topic: str) -> bool:
    """Whether the name server has a route for ``topic`` (False while it does not answer)."""
    try:
        return bool(admin.topic_route(topic).queue_datas)
    except RocketqError:
        return False


class BrokerPair:
    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.namesrv_addr = f"{HOST}:{free_port()}"
        self.broker_port = free_port()
        self.broker_addr = f"{HOST}:{self.broker_port}"
        self.processes: list[RocketqProcess] = []

    def probe_config(self) -> ClientConfig:
        """The client settings that read the cluster's membership."""
        raise NotImplementedError

    def admin_config(self) -> ClientConfig:
        """The client settings that create the topic."""
        return self.probe_config()

    def start_pair(
        self,
        cluster: str,
        topic: str,
        namesrv_conf: Mapping[str, str],
        broker_conf: Mapping[str, str],
        registered: str = "the broker registered",
    ) -> None:
        """Start both processes with these extra keys, wait for the registration, then create
        ``topic`` on ``cluster`` and wait for its route."""
        port = self.namesrv_addr.rsplit(":", 1)[1]
        conf = write_conf(
            self.root / "namesrv.conf", {"listenPort": port, "bindAddress": HOST, **namesrv_conf}
        )
        self.processes.append(RocketqProcess("namesrv", ["namesrv", "-c", str(conf)], self.root / "logs"))
        broker = write_broker_conf(
            self.root / "broker.conf",
            {
                "brokerClusterName": cluster,
                "brokerName": "broker-a",
                "namesrvAddr": self.namesrv_addr,
                "brokerIP1": HOST,
                "bindAddress": HOST,
                "listenPort": str(self.broker_port),
                "fastListenPortEnable": "false",
                "registerNameServerPeriod": "1000",
                "storePathRootDir": str(self.root / "store"),
                **broker_conf,
            },
        )
        self.processes.append(RocketqProcess("broker", ["broker", "-c", str(broker)], self.root / "logs"))
        self.wait_until(lambda: self.broker_addr in self.cluster_addrs(), registered)
        with Admin(config=self.admin_config(), timeout_ms=3000) as admin:
            admin.create_topic(topic, 2, 2, cluster=cluster)
            self.wait_until(lambda: self.routed(admin, topic), f"route of {topic}")

    def cluster_addrs(self) -> set[str]:
        try:
            with Admin(config=self.probe_config(), timeout_ms=3000) as admin:
                info = admin.cluster_info()
        except RocketqError:
            return set()
        return {addr for addrs in info.broker_addr_table.values() for addr in addrs.broker_addrs.values()}

    routed = staticmethod(topic_routed)

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        wait_until(condition, what, START_TIMEOUT_S, self.processes)

    def close(self) -> None:
        for process in self.processes:
            process.close()


def push_consume_until(config: ClientConfig, group: str, topic: str, body: bytes, what: str) -> None:
    """A push consumer of ``group`` on ``topic`` from the first offset, until it got ``body``."""
    received: list[bytes] = []
    consumer = PushConsumer(
        group,
        config=config,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        rebalance_interval_ms=300,
        heartbeat_interval_ms=1000,
    )
    consumer.subscribe(topic, "*")

    def listen(messages: list[object]) -> ConsumeStatus:
        received.extend(m.body for m in messages)  # type: ignore[attr-defined]
        return ConsumeStatus.CONSUME_SUCCESS

    consumer.register_listener(listen)
    consumer.start()
    try:
        wait_until(lambda: body in received, what, START_TIMEOUT_S)
    finally:
        consumer.shutdown()

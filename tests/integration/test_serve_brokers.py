"""``rocketq serve --brokers 2``: a name server and two broker processes of one cluster, each with
its own store, and a topic created on both at start.

A producer's sends spread over the queues of both brokers; a consumer of all the topic's queues
gets every message back from both; each broker's CommitLog holds only its own share. The test stops only
the serve process it started (which stops its brokers).
"""

from __future__ import annotations

import pathlib
import re
from collections import Counter
from collections.abc import Iterator

import pytest
from procs import RocketqProcess

from _support.wait import collect_until
from rocketq.cli.brokers_serve import broker_names
from rocketq.client import Admin, LitePullConsumer, Message, MessageQueue, Producer, SendStatus
from rocketq.errors import ConfigError

TOPIC = "SpreadT"
QUEUES = 4
WAIT_S = 45.0
_BROKER_LINE = re.compile(r"^\s+broker\s+(\S+:\d+)\s+\((broker-\w), pid (\d+), data in (\S+)\)", re.MULTILINE)


def test_broker_names_follow_the_first() -> None:
    assert broker_names("broker-a", 3) == ["broker-a", "broker-b", "broker-c"]
    assert broker_names("b1", 2) == ["b1", "b1-1"]
    assert broker_names("shard-y", 3) == ["shard-y", "shard-y-1", "shard-y-2"]  # past z
    with pytest.raises(ConfigError):
        broker_names("broker-a", 0)


class Served:
    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.data = tmp_path / "data"
        args = ["serve", "--brokers", "2", "--data-dir", str(self.data), "--namesrv-port", "0"]
        args += ["--broker-port", "0", "--topic", TOPIC, "--queues", str(QUEUES)]
        self.proc = RocketqProcess("serve-brokers2", args, tmp_path / "logs")
        self.namesrv = ""
        self.brokers: dict[str, tuple[str, int, str]] = {}  # name -> (address, pid, data dir)

    def start(self) -> None:
        self.namesrv = self.proc.wait_banner(["name server", "broker"], WAIT_S)["name server"]
        for addr, name, pid, data in _BROKER_LINE.findall(self.proc.log_text(None)):
            self.brokers[name] = (addr, int(pid), data)

    def logs(self) -> str:
        out = [self.proc.diagnostics()]
        for path in sorted(self.data.glob("broker-*.log")):
            out.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(out)


@pytest.fixture
def served(tmp_path: pathlib.Path) -> Iterator[Served]:
    s = Served(tmp_path)
    try:
        s.start()
        yield s
    except BaseException:
        print(s.logs())
        raise
    finally:
        s.proc.stop()


def test_sends_spread_over_both_brokers_and_all_come_back(served: Served) -> None:
    assert sorted(served.brokers) == ["broker-a", "broker-b"]
    assert len({addr for addr, _, _ in served.brokers.values()}) == 2
    assert len({data for _, _, data in served.brokers.values()}) == 2
    with Admin(served.namesrv) as admin:
        info = admin.cluster_info()
        assert set(info.cluster_addr_table["DefaultCluster"]) == {"broker-a", "broker-b"}
        route = admin.topic_route(TOPIC)
        assert sorted((q.broker_name, q.write_queue_nums) for q in route.queue_datas) == [
            ("broker-a", QUEUES),
            ("broker-b", QUEUES),
        ]
    sent = [f"<spread {i:03d}>".encode() for i in range(40)]
    with Producer("SpreadPG", namesrv_addr=served.namesrv) as producer:
        results = [producer.send(Message(TOPIC, body)) for body in sent]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    per_broker = Counter(r.message_queue.broker_name for r in results)
    # round robin over all 8 queues; the producer's fault back-off may skip a broker whose
    # answers are slow for a while (a loaded machine), so only "both got some" is certain
    assert set(per_broker) == {"broker-a", "broker-b"}, per_broker
    consumer = LitePullConsumer(
        "SpreadCG", namesrv_addr=served.namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    with consumer:
        consumer.assign([MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(QUEUES)])
        got = collect_until(lambda: consumer.poll(timeout_ms=1000), len(sent), "messages", WAIT_S)
    assert sorted(m.body for m in got) == sorted(sent)
    for name, (_, _, data) in served.brokers.items():
        segments = list(pathlib.Path(data, "commitlog").iterdir())
        assert segments, name
        stored = b""
        for path in segments:
            with path.open("rb") as f:
                stored += f.read(1 << 20)  # the first MiB of each segment holds every record
        mine = [b for b, r in zip(sent, results, strict=True) if r.message_queue.broker_name == name]
        assert all(b in stored for b in mine), name
        assert not any(b in stored for b in sent if b not in mine), name

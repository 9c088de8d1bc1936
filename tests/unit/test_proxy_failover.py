"""The cluster-mode proxy while a broker group changes its master: which refusals are retried, for
how long, and which queue a retried send takes (``rocketq.proxy.failover``, ``ClusterServicer``)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from rocketq.errors import (
    ConnectionClosed,
    NoPermission,
    RemotingConnectError,
    RemotingTimeout,
    ServiceNotAvailable,
    SystemBusy,
)
from rocketq.protocol.route import BrokerData, QueueData, TopicRouteData
from rocketq.proxy import failover
from rocketq.proxy.cluster import ClusterServicer
from rocketq.remoting import RemotingClient


class _Context:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


def _attempts(errors: list[BaseException]) -> tuple[list[float], object]:
    """An attempt that raises ``errors`` one by one, then answers "done"; the times it ran."""
    times: list[float] = []

    async def attempt() -> str:
        times.append(time.monotonic())
        if errors:
            raise errors.pop(0)
        return "done"

    return times, attempt


@pytest.mark.parametrize(
    "refusal",
    [
        RemotingConnectError("refused"),
        ServiceNotAvailable("this broker is a DLedger follower"),
        SystemBusy("busy"),
        failover.NoMaster("no master"),
    ],
)
def test_definite_refusals_are_tried_again_with_a_growing_back_off(refusal: BaseException) -> None:
    times, attempt = _attempts([refusal, refusal, refusal])
    result = asyncio.run(failover.retrying(time.monotonic() + 5, "send", attempt))
    assert result == "done" and len(times) == 4
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19 and gaps[2] >= 0.39


@pytest.mark.parametrize("outcome_unknown", [RemotingTimeout("t"), ConnectionClosed("c"), NoPermission("p")])
def test_other_errors_are_answered_at_once(outcome_unknown: BaseException) -> None:
    times, attempt = _attempts([outcome_unknown])
    with pytest.raises(type(outcome_unknown)):
        asyncio.run(failover.retrying(time.monotonic() + 5, "send", attempt))
    assert len(times) == 1


def test_retries_end_at_the_deadline_with_the_last_refusal() -> None:
    refusals: list[BaseException] = [ServiceNotAvailable(f"no {i}") for i in range(100)]
    times, attempt = _attempts(refusals)
    began = time.monotonic()
    with pytest.raises(ServiceNotAvailable) as caught:
        asyncio.run(failover.retrying(began + 0.5, "send to topic T", attempt))
    assert 0.25 < time.monotonic() - began < 0.6
    assert len(times) == 3  # at 0, 0.1 and 0.3 s: the next (0.7 s) is past the deadline
    assert "send to topic T: refused 3 times while waiting for a master" in (caught.value.__notes__ or [])


def test_the_retry_window_is_a_share_of_the_call_deadline_at_most_the_cap() -> None:
    now = time.monotonic()
    assert failover.retry_deadline(_Context(None), 15.0) == pytest.approx(now + 15.0, abs=0.05)
    assert failover.retry_deadline(_Context(3.0), 15.0) == pytest.approx(now + 2.4, abs=0.05)
    assert failover.retry_deadline(_Context(100.0), 15.0) == pytest.approx(now + 15.0, abs=0.05)
    assert failover.retry_deadline(_Context(-1.0), 15.0) == pytest.approx(now, abs=0.05)


def _route(*groups: tuple[str, dict[int, str], int]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=tuple(QueueData(name, 2, 2, perm) for name, _, perm in groups),
        broker_datas=tuple(BrokerData("C", name, addrs) for name, addrs, _ in groups),
    )


def test_a_send_queue_needs_a_master_and_avoids_the_broker_that_refused() -> None:
    servicer = ClusterServicer(
        RemotingClient(), ["127.0.0.1:1"], advertised_host="127.0.0.1", advertised_port=lambda: 8081
    )
    # a DLedger group between masters: the route lists its followers only
    electing = _route(("broker-a", {2: "127.0.0.1:10921", 3: "127.0.0.1:10931"}, 6))
    with pytest.raises(failover.NoMaster, match="broker broker-a has no master"):
        servicer._send_queue("T", electing, None, None)
    read_only = _route(("broker-a", {0: "127.0.0.1:10911"}, 4))
    with pytest.raises(NoPermission, match="no writable queue"):
        servicer._send_queue("T", read_only, None, None)
    both = _route(("broker-a", {0: "127.0.0.1:10911"}, 6), ("broker-b", {0: "127.0.0.1:10941"}, 6))
    picked = {servicer._send_queue("T", both, None, "broker-a")[0].broker_name for _ in range(8)}
    assert picked == {"broker-b"}
    picked = {servicer._send_queue("T", both, None, None)[0].broker_name for _ in range(8)}
    assert picked == {"broker-a", "broker-b"}
    # a FIFO message keeps its queue (order) whatever refused it
    fifo = {servicer._send_queue("T", both, "group-1", "broker-a") for _ in range(4)}
    assert len(fifo) == 1
    only_a = _route(("broker-a", {0: "127.0.0.1:10911"}, 6))
    mq, addr = servicer._send_queue("T", only_a, None, "broker-a")  # nowhere else to go
    assert (mq.broker_name, addr) == ("broker-a", "127.0.0.1:10911")

"""Group membership of a subscribing consumer: heartbeats, and rebalancing the topics' queues.

:func:`plan_rebalance` is the rebalance as a pure function: one topic's readable queues and the
group's consumer ids go through the ``allocate_strategy`` (:mod:`rocketq.client.allocate`);
broadcasting owns every queue. :class:`GroupMembership` (a layer of
:class:`~rocketq.client.consumer_core.ConsumerCore`) sends HEART_BEAT (34) with the
subscriptions to every broker of the subscribed topics every ``heartbeat_interval_ms`` (30 s),
and rebalances every ``rebalance_interval_ms`` (20 s) and whenever a broker sends
NOTIFY_CONSUMER_IDS_CHANGED (40): for each topic the queues come from the route and the consumer
ids from GET_CONSUMER_LIST_BY_GROUP (38). A queue that leaves the assignment has its offset
committed first; :attr:`~ConsumerQueues.assignment_changed` is set when the owned queues change.
At shutdown the member leaves with UNREGISTER_CLIENT.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rocketq.client.aio import error_for_response
from rocketq.client.allocate import AllocateStrategy
from rocketq.client.config import MessageModel
from rocketq.client.consumer_queues import ConsumerQueues, QueueState
from rocketq.errors import ResponseCode, RocketqError
from rocketq.protocol.queue import MessageQueue
from rocketq.protocol.topic import is_retry_topic
from rocketq.remoting import RequestCode, create_request

log = logging.getLogger(__name__)


def _route_miss_level(topic: str) -> int:
    """How loudly to log a topic without a route: a group's ``%RETRY%`` topic has none until the
    group's first heartbeat makes the broker create it and register it with the name servers, so
    a fresh group misses it at start (DEBUG, as RocketMQ's client); any other topic: WARNING."""
    return logging.DEBUG if is_retry_topic(topic) else logging.WARNING


@dataclass(frozen=True, slots=True)
class RebalancePlan:
    """One topic's rebalance: the queues this client should own, and the change from ``owned``
    (all three sorted)."""

    assigned: tuple[MessageQueue, ...]
    added: tuple[MessageQueue, ...]
    dropped: tuple[MessageQueue, ...]


def plan_rebalance(
    queues: Sequence[MessageQueue],
    client_ids: Sequence[str],
    client_id: str,
    strategy: AllocateStrategy,
    *,
    owned: Iterable[MessageQueue] = (),
    message_model: MessageModel = MessageModel.CLUSTERING,
) -> RebalancePlan:
    """The share of ``client_id`` of one topic's readable ``queues`` among the group's
    ``client_ids`` by ``strategy``, and what changes from the queues of the topic it ``owned``.

    Broadcasting: every queue. Clustering with no client id known (the broker answered none):
    nothing changes, as RocketMQ, which skips the topic rather than give every queue up."""
    current = sorted(set(owned))
    if message_model is MessageModel.BROADCASTING:
        assigned = sorted(set(queues))
    elif not client_ids:
        assigned = current
    else:
        assigned = sorted(set(strategy(sorted(set(queues)), sorted(set(client_ids)), client_id)))
    keep = set(assigned)
    was = set(current)
    return RebalancePlan(
        assigned=tuple(assigned),
        added=tuple(mq for mq in assigned if mq not in was),
        dropped=tuple(mq for mq in current if mq not in keep),
    )


class GroupMembership(ConsumerQueues):
    """Heartbeats, rebalancing and leaving the group, a layer of
    :class:`~rocketq.client.consumer_core.ConsumerCore`."""

    def _heartbeat_body(self) -> bytes:
        consumer = {
            "groupName": self.group,
            "consumeType": self.consume_type,
            "messageModel": self.message_model.value,
            "consumeFromWhere": self.consume_from_where.value,
            "unitMode": False,
            "subscriptionDataSet": [s.to_json() for s in self._subscriptions.values()],
        }
        data = {
            "clientID": self.client_id,
            "producerDataSet": [],
            "consumerDataSet": [consumer],
            "heartbeatFingerprint": 0,
            "withoutSub": False,
        }
        return json.dumps(data, separators=(",", ":")).encode()

    async def _subscribed_brokers(self) -> list[str]:
        assert self._routes is not None
        for topic in list(self._subscriptions):
            try:
                self._read_queues(topic, await self._routes.fetch_route(topic))
            except RocketqError as exc:
                log.log(_route_miss_level(topic), "route of topic %s unavailable: %s", topic, exc)
        return sorted(set(self._broker_addrs.values()))

    async def _heartbeat_all(self) -> None:
        remoting = self._running()
        body = self._heartbeat_body()
        for addr in await self._subscribed_brokers():
            request = create_request(RequestCode.HEART_BEAT, {}, body)
            try:
                response = await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
                if response.code != ResponseCode.SUCCESS:
                    raise error_for_response(response, addr)
            except RocketqError as exc:
                log.warning("heartbeat to broker %s failed: %s", addr, exc)

    async def _unregister(self) -> None:
        remoting = self._running_or_stopping()
        for addr in sorted(set(self._broker_addrs.values())):
            request = create_request(
                RequestCode.UNREGISTER_CLIENT, {"clientID": self.client_id, "consumerGroup": self.group}
            )
            try:
                await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
            except RocketqError as exc:
                log.debug("unregister from broker %s failed: %s", addr, exc)

    async def _consumer_ids(self, queues: Sequence[MessageQueue]) -> list[str]:
        remoting = self._running()
        for addr in sorted({self._broker_addrs[mq.broker_name] for mq in queues}):
            request = create_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": self.group})
            try:
                response = await remoting.invoke(addr, request, self.request_timeout_ms / 1000)
            except RocketqError as exc:
                log.warning("consumer list of group %s from %s failed: %s", self.group, addr, exc)
                continue
            if response.code == ResponseCode.SUCCESS and response.body:
                ids = json.loads(response.body).get("consumerIdList") or []
                return [str(i) for i in ids]
        return []

    async def _rebalance(self) -> None:
        """Recompute the owned queues of every subscribed topic (:func:`plan_rebalance`)."""
        if self._mode != "subscribe":
            return
        assert self._routes is not None
        wanted: set[MessageQueue] = set()
        for topic in list(self._subscriptions):
            owned = [mq for mq in self._queues if mq.topic == topic]
            try:
                queues = self._read_queues(topic, await self._routes.fetch_route(topic))
            except RocketqError as exc:
                log.log(_route_miss_level(topic), "rebalance of topic %s skipped, no route: %s", topic, exc)
                wanted.update(owned)
                continue
            ids: list[str] = []
            if self.clustering and queues:
                ids = await self._consumer_ids(queues)
            plan = plan_rebalance(
                queues,
                ids,
                self.client_id,
                self.allocate_strategy,
                owned=owned,
                message_model=self.message_model,
            )
            wanted.update(plan.assigned)
        # queues of topics no longer subscribed leave too
        removed = [mq for mq in self._queues if mq not in wanted]
        added = [mq for mq in sorted(wanted) if mq not in self._queues]
        if not removed and not added:
            return
        if removed:
            await self.commit_offsets(raise_errors=False, queues=removed)
        queues_now = {mq: st for mq, st in self._queues.items() if mq in wanted}
        queues_now.update((mq, QueueState()) for mq in added)
        self._queues = dict(sorted(queues_now.items()))
        log.info(
            "consumer %s of group %s now owns %d queue(s)", self.client_id, self.group, len(self._queues)
        )
        assert self._assignment_changed is not None
        self._assignment_changed.set()

    async def _rebalance_loop(self) -> None:
        assert self._rebalance_wanted is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_wanted.wait(), self.rebalance_interval_ms / 1000)
            self._rebalance_wanted.clear()
            try:
                if self._subs_changed:
                    self._subs_changed = False
                    await self._heartbeat_all()
                await self._rebalance()
            except RocketqError as exc:
                log.warning("rebalance of group %s failed: %s", self.group, exc)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            if self._mode == "subscribe":
                await self._heartbeat_all()

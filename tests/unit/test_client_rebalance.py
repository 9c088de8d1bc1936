"""plan_rebalance: one topic's share of one client and the change from what it owned, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketq.client._routes import MessageQueue
from rocketq.client.allocate import (
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_consistent_hash,
)
from rocketq.client.config import MessageModel
from rocketq.client.consumer_core import RebalancePlan, plan_rebalance


def mq(broker: str, qid: int, topic: str = "T") -> MessageQueue:
    return MessageQueue(topic, broker, qid)


A0, A1, A2, A3 = (mq("broker-a", i) for i in range(4))
B0, B1 = mq("broker-b", 0), mq("broker-b", 1)


def test_first_member_of_three_takes_the_first_contiguous_run() -> None:
    queues = [B1, A2, A0, B0, A3, A1]  # any order: the plan sorts
    plan = plan_rebalance(queues, ["c2", "c3", "c1"], "c1", allocate_averagely)
    assert plan == RebalancePlan(assigned=(A0, A1), added=(A0, A1), dropped=())


def test_a_member_joining_moves_queues_away() -> None:
    queues = [A0, A1, A2, A3]
    alone = plan_rebalance(queues, ["c1"], "c1", allocate_averagely)
    assert alone.assigned == (A0, A1, A2, A3)
    shared = plan_rebalance(queues, ["c1", "c2"], "c1", allocate_averagely, owned=alone.assigned)
    assert shared == RebalancePlan(assigned=(A0, A1), added=(), dropped=(A2, A3))
    other = plan_rebalance(queues, ["c1", "c2"], "c2", allocate_averagely)
    assert other.assigned == (A2, A3)


def test_by_circle_deals_queues_like_cards() -> None:
    plan = plan_rebalance([A0, A1, A2, A3], ["c1", "c2"], "c2", allocate_averagely_by_circle, owned=[A0])
    assert plan == RebalancePlan(assigned=(A1, A3), added=(A1, A3), dropped=(A0,))


def test_unchanged_share_is_no_change() -> None:
    plan = plan_rebalance([A0, A1], ["c1", "c2"], "c2", allocate_averagely, owned=[A1])
    assert plan == RebalancePlan(assigned=(A1,), added=(), dropped=())


def test_no_client_ids_keeps_what_was_owned() -> None:
    plan = plan_rebalance([A0, A1, A2], [], "c1", allocate_averagely, owned=[A2, A0])
    assert plan == RebalancePlan(assigned=(A0, A2), added=(), dropped=())


def test_a_client_not_in_the_group_gives_everything_up() -> None:
    plan = plan_rebalance([A0, A1], ["c2", "c3"], "c1", allocate_averagely, owned=[A0, A1])
    assert plan == RebalancePlan(assigned=(), added=(), dropped=(A0, A1))


def test_queues_that_left_the_route_are_dropped() -> None:
    plan = plan_rebalance([A0, A1], ["c1"], "c1", allocate_averagely, owned=[A0, A1, B0])
    assert plan == RebalancePlan(assigned=(A0, A1), added=(), dropped=(B0,))


def test_broadcasting_owns_every_queue_whatever_the_group() -> None:
    plan = plan_rebalance(
        [B0, A1, A0], [], "c1", allocate_averagely, owned=[A1, A3], message_model=MessageModel.BROADCASTING
    )
    assert plan == RebalancePlan(assigned=(A0, A1, B0), added=(A0, B0), dropped=(A3,))


def test_the_strategy_gets_sorted_deduplicated_inputs() -> None:
    seen: list[tuple[list[MessageQueue], list[str], str]] = []

    def spy(queues: object, ids: object, me: str) -> list[MessageQueue]:
        assert isinstance(queues, list) and isinstance(ids, list)
        seen.append((queues, ids, me))
        return [queues[0]]

    plan = plan_rebalance([A1, A0, A1], ["c2", "c1", "c2"], "c1", spy)
    assert seen == [([A0, A1], ["c1", "c2"], "c1")]
    assert plan.assigned == (A0,)


STRATEGIES = [allocate_averagely, allocate_averagely_by_circle, allocate_consistent_hash]


@pytest.mark.parametrize("strategy", STRATEGIES)
@given(n_queues=st.integers(0, 12), n_clients=st.integers(1, 6))
def test_members_plans_cover_every_queue_once(strategy: object, n_queues: int, n_clients: int) -> None:
    queues = [mq("broker-a", i) for i in range(n_queues)]
    ids = [f"10.0.0.1@{i}" for i in range(n_clients)]
    owned: list[MessageQueue] = []
    for me in ids:
        plan = plan_rebalance(queues, ids, me, strategy)  # type: ignore[arg-type]
        assert plan.added == plan.assigned and plan.dropped == ()
        owned.extend(plan.assigned)
    assert sorted(owned) == queues

"""Queue allocation strategies: disjoint, complete shares, and each strategy's own layout."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketq.client.allocate import (
    STRATEGIES,
    AllocateStrategy,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_consistent_hash,
    consistent_hash_strategy,
    queue_key,
    resolve_strategy,
    ring_hash,
)
from rocketq.client.lite_pull import allocate_averagely as reexported
from rocketq.errors import ConfigError
from rocketq.protocol.queue import MessageQueue


def queues(n: int, brokers: tuple[str, ...] = ("broker-a",)) -> list[MessageQueue]:
    return [MessageQueue("T", b, i) for b in brokers for i in range(n)]


def ids(n: int) -> list[str]:
    return [f"10.0.0.{i}@{100 + i}#1" for i in range(n)]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@given(n_queues=st.integers(0, 40), n_consumers=st.integers(1, 12), shuffle_seed=st.randoms())
def test_shares_are_disjoint_and_cover_every_queue(
    name: str, n_queues: int, n_consumers: int, shuffle_seed: object
) -> None:
    strategy = STRATEGIES[name]
    mqs = queues(n_queues, ("broker-a", "broker-b"))
    members = ids(n_consumers)
    shuffled = list(members)
    shuffle_seed.shuffle(shuffled)  # type: ignore[attr-defined]
    owned: list[MessageQueue] = []
    for me in members:
        # each member sees the inputs in its own order; the result must not depend on it
        share = strategy(list(reversed(mqs)), shuffled, me)
        assert share == strategy(mqs, members, me)
        owned.extend(share)
    assert sorted(owned) == sorted(mqs)
    assert len(set(owned)) == len(owned)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_stranger_and_empty_inputs_get_nothing(name: str) -> None:
    strategy = STRATEGIES[name]
    assert strategy(queues(4), ids(2), "not-a-member") == []
    assert strategy([], ids(2), ids(2)[0]) == []


def test_averagely_gives_contiguous_runs_first_ones_larger() -> None:
    mqs, members = queues(8), ids(3)
    shares = [[mq.queue_id for mq in allocate_averagely(mqs, members, me)] for me in members]
    assert shares == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert reexported is allocate_averagely


def test_averagely_with_more_consumers_than_queues() -> None:
    mqs, members = queues(2), ids(4)
    shares = [[mq.queue_id for mq in allocate_averagely(mqs, members, me)] for me in members]
    assert shares == [[0], [1], [], []]


def test_by_circle_deals_queues_like_cards() -> None:
    mqs, members = queues(8), ids(3)
    shares = [[mq.queue_id for mq in allocate_averagely_by_circle(mqs, members, me)] for me in members]
    assert shares == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_ring_hash_is_first_four_md5_bytes() -> None:
    digest = hashlib.md5(b"abc").digest()
    assert ring_hash("abc") == (digest[0] << 24) | (digest[1] << 16) | (digest[2] << 8) | digest[3]
    assert queue_key(MessageQueue("T", "b", 3)) == "MessageQueue [topic=T, brokerName=b, queueId=3]"


def owner_map(
    strategy: AllocateStrategy, mqs: list[MessageQueue], members: list[str]
) -> dict[MessageQueue, str]:
    return {mq: me for me in members for mq in strategy(mqs, members, me)}


def test_consistent_hash_moves_few_queues_when_a_member_joins() -> None:
    mqs = queues(64, ("broker-a", "broker-b"))
    before = owner_map(allocate_consistent_hash, mqs, ids(4))
    after = owner_map(allocate_consistent_hash, mqs, ids(5))
    newcomer = ids(5)[4]
    moved = [mq for mq in mqs if before[mq] != after[mq]]
    # only queues taken by the newcomer move; with averagely most queues would shift
    assert all(after[mq] == newcomer for mq in moved)
    averagely_moved = sum(
        1
        for mq, who in owner_map(allocate_averagely, mqs, ids(4)).items()
        if owner_map(allocate_averagely, mqs, ids(5))[mq] != who
    )
    assert len(moved) < averagely_moved


def test_consistent_hash_follows_the_ring() -> None:
    members = ids(3)
    strategy = consistent_hash_strategy(virtual_nodes=3)
    ring = sorted((ring_hash(f"{cid}-{n}"), cid) for cid in members for n in range(3))
    for mq in queues(16):
        h = ring_hash(queue_key(mq))
        expected = next((cid for point, cid in ring if point >= h), ring[0][1])
        assert strategy([mq], members, expected) == [mq]


def test_resolve_by_name_or_callable_and_unknown_names() -> None:
    assert resolve_strategy("avg") is allocate_averagely
    assert resolve_strategy("AVG_BY_CIRCLE") is allocate_averagely_by_circle
    assert resolve_strategy(allocate_consistent_hash) is allocate_consistent_hash
    with pytest.raises(ConfigError, match="'ROUND_ROBIN' is unknown"):
        resolve_strategy("ROUND_ROBIN")
    with pytest.raises(ConfigError, match="virtual_nodes=0"):
        consistent_hash_strategy(0)

"""Every synchronous facade offers what its asyncio class offers: the same constructor keywords
(names, kinds and defaults), the same public methods with the same parameters, and the same
public properties. The facades spell their keywords out, so an unknown one is a TypeError."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from rocketq.client import (
    Admin,
    AsyncAdmin,
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    AsyncTransactionProducer,
    LitePullConsumer,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from rocketq.client._facade import BlockingFacade

PAIRS: list[tuple[type[Any], type[Any]]] = [
    (Producer, AsyncProducer),
    (LitePullConsumer, AsyncLitePullConsumer),
    (PushConsumer, AsyncPushConsumer),
    (TransactionProducer, AsyncTransactionProducer),
    (Admin, AsyncAdmin),
]
IDS = [sync.__name__ for sync, _ in PAIRS]


def parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    """Name, kind and default of every parameter but ``self`` (annotations may differ: a sync
    listener is a plain function where the async one may be a coroutine function)."""
    return [
        (p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"
    ]


def public_members(cls: type[Any]) -> dict[str, object]:
    return {
        name: inspect.getattr_static(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and not isinstance(inspect.getattr_static(cls, name), type)
    }


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=IDS)
def test_constructor_keywords_match(sync: type[Any], aio: type[Any]) -> None:
    assert issubclass(sync, BlockingFacade)
    assert parameters(sync.__init__) == parameters(aio.__init__)
    kinds = {kind for _, kind, _ in parameters(sync.__init__)}
    assert inspect.Parameter.VAR_KEYWORD not in kinds


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=IDS)
def test_public_methods_and_properties_match(sync: type[Any], aio: type[Any]) -> None:
    theirs = public_members(sync)
    for name, member in public_members(aio).items():
        assert name in theirs, f"{sync.__name__} lacks {name}"
        if isinstance(member, property):
            assert isinstance(theirs[name], property), f"{sync.__name__}.{name} is not a property"
            continue
        assert parameters(getattr(sync, name)) == parameters(getattr(aio, name)), f"{sync.__name__}.{name}"


@pytest.mark.parametrize("cls", [cls for pair in PAIRS for cls in pair], ids=lambda c: c.__name__)
def test_unknown_keyword_is_a_type_error(cls: type[Any]) -> None:
    kwargs: dict[str, Any] = {"namesrv_addr": "127.0.0.1:9876", "sendTimeout": 3000}
    args: tuple[Any, ...] = () if cls in (Admin, AsyncAdmin) else ("G",)
    if cls in (TransactionProducer, AsyncTransactionProducer):
        kwargs["check_listener"] = print
    with pytest.raises(TypeError, match="sendTimeout"):
        cls(*args, **kwargs)


def test_the_gaps_of_earlier_facades_are_closed() -> None:
    assert {"min_offset", "max_offset"} <= set(public_members(LitePullConsumer))
    assert "sharding_key" in inspect.signature(TransactionProducer.send_message_in_transaction).parameters

"""The properties a sent message's record carries, as the send path builds them.

A message's properties arrive as text (``name\x01value\x02`` pairs); its record carries them
with POP_CK dropped, UNIQ_KEY added when missing and CLUSTER set to the broker's cluster. A batch
message adds the batch-wide properties it has none of its own for, and may not carry a delay
level. :func:`properties_as_sent` is the shortcut for the usual batch of a RocketMQ client (only
CLUSTER to add): the text as it came plus the CLUSTER pair, byte for byte what the general path
writes (``tests/property/test_batch_entry_properties.py`` holds them equal).

:func:`sent_properties` is a single send's whole step, text to record bytes; it is compiled when
the C accelerator is in use (:mod:`rocketq.speedups`; ASCII text there, anything else by the pure
function, :data:`pure_sent_properties`).
"""

from __future__ import annotations

from collections.abc import Callable

from rocketq import speedups as _speedups
from rocketq.errors import MessageIllegal
from rocketq.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_POP_CK,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_properties,
    encode_properties,
    number_property,
)

PROPERTY_CLUSTER = "CLUSTER"


def base_properties(props: dict[str, str], cluster: str, new_id: Callable[[], str]) -> dict[str, str]:
    """A sent message's properties as its record carries them: POP_CK dropped, UNIQ_KEY added
    when missing (``new_id()``), CLUSTER set; ``props`` is changed and returned."""
    props.pop(PROPERTY_POP_CK, None)
    if not props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX):
        props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = new_id()
    props[PROPERTY_CLUSTER] = cluster
    return props


def encoded_or_none(props: dict[str, str]) -> bytes | None:
    """``encode_properties(props)`` as UTF-8, or None when it refuses them (a separator in a name
    or value, a lone surrogate): the caller then calls it where its error belongs."""
    try:
        return encode_properties(props).encode("utf-8")
    except MessageIllegal:
        return None


def sent_properties(
    text: str | None, cluster: str, new_id: Callable[[], str]
) -> tuple[dict[str, str], bytes | None]:
    """A single send's properties: those of ``text`` (the request header's) made into what its
    record carries (:func:`base_properties`), and their record bytes (:func:`encoded_or_none`)."""
    props = base_properties(decode_properties(text or ""), cluster, new_id)
    return props, encoded_or_none(props)


#: The pure-Python sent_properties, whichever implementation the name is bound to.
pure_sent_properties = sent_properties
if _speedups.COMPILED is not None:
    _speedups.COMPILED.setup_sent_properties(pure_sent_properties, encoded_or_none)
    sent_properties = _speedups.COMPILED.sent_properties


def batch_entry_properties(
    props: dict[str, str], shared: dict[str, str], cluster: str, new_id: Callable[[], str], index: int
) -> bytes:
    """The record properties of batch message ``index`` from its decoded properties ``props``
    (changed): :func:`base_properties`, a delay level refused, the batch-wide properties
    ``shared`` added where the message has none of its own."""
    props = base_properties(props, cluster, new_id)
    if delay_level(props) > 0:
        raise MessageIllegal(f"batch message {index} has a delay level; batches do not support delays")
    for k, v in shared.items():
        props.setdefault(k, v)
    return encode_properties(props).encode("utf-8")


def cluster_property(cluster: str) -> bytes | None:
    """The CLUSTER property as :func:`batch_entry_properties` writes it last, or None when the
    name is not one it writes as is (it contains a separator, or cannot be UTF-8)."""
    if NAME_VALUE_SEPARATOR in cluster or PROPERTY_SEPARATOR in cluster:
        return None
    try:
        return f"{PROPERTY_CLUSTER}{NAME_VALUE_SEPARATOR}{cluster}{PROPERTY_SEPARATOR}".encode()
    except UnicodeEncodeError:
        return None


def properties_as_sent(
    raw: bytes, text: str, props: dict[str, str], shared: dict[str, str], cluster: bytes
) -> bytes | None:
    """What :func:`batch_entry_properties` writes for a batch message whose properties ``raw``
    (``text`` decoded as UTF-8, ``props`` decoded from it) it would only add the CLUSTER
    property (``cluster``, from :func:`cluster_property`) to, else None: every piece of the text
    is one ``name\x01value\x02`` with a non-empty name and value and no name twice (so that
    encoding ``props`` gives the text back), UNIQ_KEY is there and not empty, every batch-wide
    property of ``shared`` is there already, and none of CLUSTER (set in its place), POP_CK
    (dropped) and DELAY (checked) is. The text as it came, then ``cluster``, without building
    and encoding the property map again (the usual batch of a RocketMQ client)."""
    n = len(props)
    if not (
        n > 0
        and text.count(PROPERTY_SEPARATOR) == n
        and text.count(NAME_VALUE_SEPARATOR) == n
        and text[-1] == PROPERTY_SEPARATOR
        and props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        and PROPERTY_CLUSTER not in props
        and PROPERTY_POP_CK not in props
        and PROPERTY_DELAY_TIME_LEVEL not in props
        and all(k in props for k in shared)
    ):
        return None
    # ASCII text is the bytes it was decoded from; otherwise it is encoded again, as the
    # general path does (invalid UTF-8 became U+FFFD)
    return (raw if text.isascii() else text.encode("utf-8")) + cluster


def delay_level(props: dict[str, str]) -> int:
    raw = props.get(PROPERTY_DELAY_TIME_LEVEL, "")
    return number_property(raw, 0)


__all__ = [
    "PROPERTY_CLUSTER",
    "base_properties",
    "batch_entry_properties",
    "cluster_property",
    "delay_level",
    "encoded_or_none",
    "properties_as_sent",
    "pure_sent_properties",
    "sent_properties",
]

"""Message filters: tag expressions and SQL92 property selectors.

:func:`compile_filter` turns a subscription's (expression type, expression) into an immutable
:class:`MessageFilter`; compile once, match many messages. Two checks, cheap first:

=====================  =================================================================
method                 used where
=====================  =================================================================
``match_tags_code``    ConsumeQueue scan, 32-bit tags hash only; True means "may match"
``match``              the message itself: tag string plus user/system properties
=====================  =================================================================

``expression_type`` is case-insensitive ``TAG`` or ``SQL92``; anything else, or an expression that
does not parse, raises :class:`rocketq.errors.SubscriptionParseFailed` (wire code 23) whose
message says what is wrong and where.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from rocketq.errors import SubscriptionParseFailed
from rocketq.filter.sql92 import EXPRESSION_SQL92, compile_sql92
from rocketq.filter.tag import EXPRESSION_TAG, SUB_ALL, TagFilter, compile_tag_filter, parse_tags

EXPRESSION_TYPES = (EXPRESSION_TAG, EXPRESSION_SQL92)


class MessageFilter(Protocol):
    """What brokers and proxies need from a compiled subscription expression."""

    @property
    def expression_type(self) -> str: ...

    @property
    def expression(self) -> str: ...

    def match_tags_code(self, tags_code: int) -> bool:
        """Cheap ConsumeQueue-level pre-check on the tags hash; True = may match."""
        ...

    def match(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        """Full check on one message (its tag and its properties)."""
        ...


def compile_filter(expression_type: str | None, expression: str | None) -> MessageFilter:
    """Compile ``expression`` of ``expression_type`` (None or empty type means ``TAG``)."""
    kind = (expression_type or EXPRESSION_TAG).strip().upper() or EXPRESSION_TAG
    if kind == EXPRESSION_TAG:
        return compile_tag_filter(expression)
    if kind == EXPRESSION_SQL92:
        return compile_sql92(expression)
    known = ", ".join(EXPRESSION_TYPES)
    shown = str(expression_type)[:32]
    raise SubscriptionParseFailed(f"unknown expression type {shown!r}; expected one of {known}")


__all__ = [
    "EXPRESSION_SQL92",
    "EXPRESSION_TAG",
    "EXPRESSION_TYPES",
    "SUB_ALL",
    "MessageFilter",
    "TagFilter",
    "compile_filter",
    "compile_tag_filter",
    "parse_tags",
]

"""Tag expressions: ``"*"`` or ``"TagA || TagB"``, matched by tag string and by tags hash code.

Grammar (``FilterAPI.buildSubscriptionData`` semantics)::

    expression := "*" | "" | tag ("||" tag)*     pieces are trimmed, empty pieces dropped

===================  ===============================================================
expression           meaning
===================  ===============================================================
``""`` / ``"*"``     every message, tagged or not
``"A || B"``         messages whose tag is exactly ``A`` or ``B``; untagged never match
``" || "``           error: no tags left after trimming
===================  ===============================================================

The ConsumeQueue stores ``tags_code`` = Java ``String.hashCode`` of the tag (0 when untagged), so
:meth:`TagFilter.match_tags_code` is a cheap pre-check that may let a hash collision through;
:meth:`TagFilter.match` compares the tag strings and is exact.

Invariant: ``match(t, p)`` implies ``match_tags_code(tags_code(t))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketq.errors import SubscriptionParseFailed
from rocketq.message import java_string_hash

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
TAG_SEPARATOR = "||"


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The tags named by ``expression``, or None when it selects everything.

    Raises :class:`SubscriptionParseFailed` when a non-empty expression names no tag.
    """
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return None
    tags = frozenset(t.strip() for t in text.split(TAG_SEPARATOR)) - {""}
    if not tags:
        raise SubscriptionParseFailed(f"tag expression {text[:128]!r} names no tag")
    return tags


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A compiled tag expression; ``tags`` is None for "everything"."""

    expression: str
    tags: frozenset[str] | None
    codes: frozenset[int] | None
    expression_type: str = EXPRESSION_TAG

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def match_tags_code(self, tags_code: int) -> bool:
        return self.codes is None or tags_code in self.codes

    def match(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        del properties  # tag filters look at the tag only
        return self.tags is None or (tags is not None and tags in self.tags)


def compile_tag_filter(expression: str | None) -> TagFilter:
    """Parse a tag expression once; the result is immutable and shareable."""
    tags = parse_tags(expression)
    if tags is None:
        return TagFilter(SUB_ALL, None, None)
    return TagFilter((expression or "").strip(), tags, frozenset(java_string_hash(t) for t in tags))


__all__ = ["EXPRESSION_TAG", "SUB_ALL", "TAG_SEPARATOR", "TagFilter", "compile_tag_filter", "parse_tags"]

"""Tag expressions and the compile_filter entry point."""

from __future__ import annotations

import pytest

from rocketq.errors import ResponseCode, SubscriptionParseFailed
from rocketq.filter import MessageFilter, TagFilter, compile_filter, parse_tags
from rocketq.message import java_string_hash, tags_code


@pytest.mark.parametrize("expression", [None, "", "*", "  *  ", "   "])
def test_everything_expressions_match_all_messages(expression: str | None) -> None:
    f = compile_filter("TAG", expression)
    assert f.expression == "*"
    assert f.match(None, {}) and f.match("A", {"a": "1"})
    assert f.match_tags_code(0) and f.match_tags_code(12345)


def test_tag_list_is_trimmed_and_empty_pieces_dropped() -> None:
    assert parse_tags(" A ||B||  || C ") == frozenset({"A", "B", "C"})
    f = compile_filter("tag", "A || B")
    assert isinstance(f, TagFilter)
    assert f.expression_type == "TAG"
    assert f.expression == "A || B"


def test_tag_match_is_exact_and_untagged_never_matches() -> None:
    f = compile_filter("TAG", "TagA || TagB")
    assert f.match("TagA", {}) and f.match("TagB", {})
    assert not f.match("TagC", {})
    assert not f.match("taga", {})
    assert not f.match(None, {})
    assert not f.match("", {})


def test_tags_code_pre_check_uses_java_hashes() -> None:
    f = compile_filter("TAG", "TagA || TagB")
    assert f.match_tags_code(java_string_hash("TagA"))
    assert f.match_tags_code(tags_code("TagB"))
    assert not f.match_tags_code(tags_code("TagC"))
    assert not f.match_tags_code(0)  # untagged


def test_hash_collision_passes_pre_check_but_not_full_match() -> None:
    # "Aa" and "BB" share Java's String.hashCode
    assert java_string_hash("Aa") == java_string_hash("BB")
    f = compile_filter("TAG", "Aa")
    assert f.match_tags_code(tags_code("BB"))
    assert not f.match("BB", {})


def test_match_implies_tags_code_pre_check() -> None:
    f = compile_filter("TAG", "x || y || 中文")
    for tag in ("x", "y", "中文"):
        assert f.match(tag, {}) and f.match_tags_code(tags_code(tag))


@pytest.mark.parametrize("expression", ["||", " || || ", "|| ||"])
def test_expression_without_tags_is_rejected(expression: str) -> None:
    with pytest.raises(SubscriptionParseFailed, match="names no tag") as info:
        compile_filter("TAG", expression)
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_expression_type_is_case_insensitive_and_defaults_to_tag() -> None:
    assert compile_filter("tAg", "A").expression_type == "TAG"
    assert compile_filter(None, "A").expression_type == "TAG"
    assert compile_filter("", "A").expression_type == "TAG"
    assert compile_filter("sql92", "a = 1").expression_type == "SQL92"


@pytest.mark.parametrize("kind", ["XPATH", "CLASS", "SQL", "TAGS"])
def test_unknown_expression_type_is_rejected(kind: str) -> None:
    with pytest.raises(SubscriptionParseFailed, match="unknown expression type") as info:
        compile_filter(kind, "a = 1")
    assert "TAG" in str(info.value) and "SQL92" in str(info.value)


def test_filters_satisfy_the_protocol() -> None:
    filters: list[MessageFilter] = [compile_filter("TAG", "A"), compile_filter("SQL92", "a > 1")]
    assert [f.expression_type for f in filters] == ["TAG", "SQL92"]
    assert filters[1].match_tags_code(0)  # SQL92 cannot decide from the tags hash

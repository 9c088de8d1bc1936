"""SQL92 selectors: tokenizer, parser (precedence, checks, errors) and evaluation semantics."""

from __future__ import annotations

import math

import pytest

from rocketq.errors import ResponseCode, SubscriptionParseFailed
from rocketq.filter import compile_filter
from rocketq.filter.sql92 import (
    MAX_NESTING,
    And,
    Between,
    BoolCast,
    Compare,
    In,
    IsNull,
    Literal,
    Negate,
    Not,
    Or,
    Property,
    StringTest,
    compile_sql92,
    java_double,
    parse_selector,
    render,
    tokenize,
)


def m(expression: str, tags: str | None = None, **props: str) -> bool:
    return compile_filter("SQL92", expression).match(tags, props)


def fails(expression: str) -> str:
    with pytest.raises(SubscriptionParseFailed) as info:
        compile_filter("SQL92", expression)
    assert info.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    return str(info.value)


# -- tokenizer ------------------------------------------------------------------------------
def test_tokens_carry_kind_value_and_column() -> None:
    toks = tokenize("a >= 5 AND b<>'it''s' OR c IN ('x') -- note\n AND d = 1.5e3")
    assert [(t.kind, t.text) for t in toks][:8] == [
        ("id", "a"),
        ("op", ">="),
        ("int", "5"),
        ("kw", "AND"),
        ("id", "b"),
        ("op", "<>"),
        ("str", "'it''s'"),
        ("kw", "OR"),
    ]
    assert toks[6].value == "it's" and toks[6].column == 15
    assert toks[-2].value == 1500.0 and toks[-1].kind == "eof"


def test_keywords_are_case_insensitive_identifiers_are_not() -> None:
    toks = tokenize("aNd Or nOt between Is nuLL true FALSE contains startsWith endswith in Abc")
    assert [t.kind for t in toks[:-2]] == ["kw"] * 12
    assert toks[-2].kind == "id" and toks[-2].text == "Abc"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("42L", 42),
        ("42l", 42),
        ("5.", 5.0),
        (".5", 0.5),
        ("5E2", 500.0),
        ("1.5e-2", 0.015),
    ],
)
def test_number_literals(text: str, value: float) -> None:
    (tok, _eof) = tokenize(text)
    assert tok.value == value and type(tok.value) is type(value)


def test_comments_are_skipped() -> None:
    assert m("/* block */ a = '1' -- trailing", a="1")
    assert m("a = '1' -- line\n AND b = '2'", a="1", b="2")


# -- parser: shape and precedence -----------------------------------------------------------
def test_and_binds_tighter_than_or() -> None:
    tree = parse_selector("a = 1 OR b = 2 AND c = 3")
    assert tree == Or(
        (
            Compare("=", Property("a"), Literal(1)),
            And((Compare("=", Property("b"), Literal(2)), Compare("=", Property("c"), Literal(3)))),
        )
    )


def test_chains_are_flattened_left_to_right() -> None:
    tree = parse_selector("a IS NULL AND b IS NULL AND c IS NULL")
    assert isinstance(tree, And) and len(tree.operands) == 3


def test_parentheses_override_precedence() -> None:
    tree = parse_selector("(a = 1 OR b = 2) AND c = 3")
    assert isinstance(tree, And) and isinstance(tree.operands[0], Or)


def test_not_binds_tighter_than_comparison_as_in_rocketmq() -> None:
    assert parse_selector("NOT a = 5") == Compare("=", Not(BoolCast(Property("a"))), Literal(5))
    assert not m("NOT a = 5", a="5")  # (NOT a) = 5 is never true
    assert m("NOT (a = 5)", a="6")
    assert "cannot be compared" in fails("NOT a > 5")


def test_unary_minus_and_plus() -> None:
    assert parse_selector("a > -5") == Compare(">", Property("a"), Negate(Literal(5)))
    assert parse_selector("a > +5") == Compare(">", Property("a"), Literal(5))
    assert m("a > -5", a="-4") and not m("a > -5", a="-6")
    assert "end of expression" in fails("a = --5")  # "--" starts a comment: "a =" is incomplete
    assert m("a = -(-5)", a="5")


def test_all_node_kinds_parse() -> None:
    tree = parse_selector(
        "a BETWEEN 1 AND 2 AND b NOT BETWEEN 3 AND 4 AND c IN ('x', 'y') AND d NOT IN ('z') "
        "AND e IS NULL AND f IS NOT NULL AND g CONTAINS 'p' AND h NOT STARTSWITH 'q' "
        "AND i ENDSWITH 'r' AND flag"
    )
    assert isinstance(tree, And)
    assert tree.operands == (
        Between(Property("a"), Literal(1), Literal(2)),
        Between(Property("b"), Literal(3), Literal(4), negated=True),
        In(Property("c"), ("x", "y")),
        In(Property("d"), ("z",), negated=True),
        IsNull(Property("e")),
        IsNull(Property("f"), negated=True),
        StringTest("CONTAINS", Property("g"), "p"),
        StringTest("STARTSWITH", Property("h"), "q", negated=True),
        StringTest("ENDSWITH", Property("i"), "r"),
        BoolCast(Property("flag")),
    )


def test_render_parses_back() -> None:
    text = "NOT (a > -1.5 OR b IN ('it''s')) AND c IS NOT NULL AND TAGS NOT CONTAINS 'x'"
    tree = parse_selector(text)
    assert parse_selector(render(tree)) == tree


def test_literal_kinds_are_distinct() -> None:
    assert Literal(1) != Literal(True)
    assert Literal(1) != Literal(1.0)
    assert Literal(0) != Literal(False)


# -- parser: errors -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "column", "words"),
    [
        ("", 1, "empty"),
        ("   ", 4, "empty"),
        ("a >", 4, "end of expression"),
        ("a = 1 b = 2", 7, "unexpected 'b'"),
        ("a = NULL", 3, "IS NULL"),
        ("NULL <> a", 6, "IS NULL"),
        ("a > 'x'", 3, "only numbers"),
        ("a > TRUE", 3, "only numbers"),
        ("(a = 1) > 2", 9, "only numbers"),
        ("a BETWEEN 'a' AND 'b'", 3, "only numbers"),
        ("a BETWEEN 5 AND 1", 3, "out of order"),
        ("a BETWEEN 1 OR 2", 13, "AND between"),
        ("'x' IN ('x')", 5, "applies to a property"),
        ("a IN ()", 7, "string literal in the IN list"),
        ("a IN (1)", 7, "string literal in the IN list"),
        ("a IN ('x' 'y')", 11, "',' or ')'"),
        ("a CONTAINS 5", 12, "string literal after CONTAINS"),
        ("a IS 5", 6, "NULL after IS"),
        ("5", 1, "not a boolean"),
        ("'x'", 1, "not a boolean"),
        ("a = 1 AND 5", 11, "not a boolean"),
        ("NOT 5", 5, "not a boolean"),
        ("TRUE = 1", 6, "cannot be compared"),
        ("a != 1", 3, "unexpected character '!'"),
        ("a = 'abc", 5, "unterminated string"),
        ("a = 1 /* open", 7, "unterminated /*"),
        ("a = .", 5, "'.' must be followed"),
        ("a = 9223372036854775808", 5, "64 bits"),
        ("a = 1e999", 5, "double range"),
        ("(a = 1", 7, "expected ')'"),
        ("a.b = 1", 2, "'.' must be followed"),
        ("a = 007", 6, "unexpected '0'"),
    ],
)
def test_bad_expressions_name_the_column(expression: str, column: int, words: str) -> None:
    message = fails(expression)
    assert f"column {column}:" in message
    assert words in message


def test_nesting_is_bounded() -> None:
    deep = "(" * (MAX_NESTING + 5) + "a = 1" + ")" * (MAX_NESTING + 5)
    assert "nests deeper" in fails(deep)
    assert "nests deeper" in fails("NOT " * (MAX_NESTING + 5) + "a")
    assert "nests deeper" in fails("a" + " = 1" * (MAX_NESTING + 5))
    fine = "(" * 50 + "a = '1'" + ")" * 50
    assert m(fine, a="1")


def test_long_flat_chains_are_fine() -> None:
    expression = " OR ".join(f"p{i} = '{i}'" for i in range(3000))
    assert m(expression, p2999="2999")
    assert not m(expression, p2999="0")


def test_missing_expression_and_oversized_text() -> None:
    with pytest.raises(SubscriptionParseFailed, match="missing"):
        compile_sql92(None)
    with pytest.raises(SubscriptionParseFailed, match="characters long"):
        compile_sql92("a = '" + "x" * 70000 + "'")


# -- evaluation: comparisons and conversions -------------------------------------------------
def test_equality_on_strings_and_numbers() -> None:
    assert m("a = 'x'", a="x") and not m("a = 'x'", a="y")
    assert m("a <> 'x'", a="y") and not m("a <> 'x'", a="x")
    assert m("a = 5", a="5") and not m("a = 5", a="6")
    assert m("a = 5.0", a="5") and m("a = 5", a="+5")
    assert m("5 = a", a="5")


def test_ordering_converts_property_to_the_literal_type() -> None:
    assert m("a > 5", a="6") and not m("a > 5", a="5")
    assert m("a >= 5", a="5") and m("a < 5", a="4") and m("a <= 5", a="5")
    assert m("a > 5.5", a="5.6") and not m("a > 5.5", a="5.5")
    assert m("a > 2147483648", a="2147483649")  # long literal → the property is read as a long


def test_integer_literal_rejects_decimal_property_values() -> None:
    # as RocketMQ: the property is parsed as an int, "5.5" does not parse → no match
    assert not m("a > 5", a="5.5")
    assert m("a > 5.0", a="5.5")
    assert not m("a > 5", a="3000000000")  # out of int range for an int literal


def test_two_properties_compare_as_doubles() -> None:
    assert m("a > b", a="10", b="9")  # numeric, not lexicographic
    assert not m("a > b", a="x", b="9")
    assert m("a = b", a="x", b="x")


def test_boolean_literals() -> None:
    assert m("a = TRUE", a="true") and m("a = TRUE", a="TRUE")
    assert not m("a = TRUE", a="yes")
    assert m("a = FALSE", a="no")  # anything but "true" reads as false, as Boolean.valueOf
    assert not m("TRUE = a", a="true")  # RocketMQ cannot convert in this direction
    assert m("TRUE = TRUE") and m("TRUE <> FALSE") and not m("TRUE = FALSE")
    assert m("TRUE") and not m("FALSE") and not m("NULL")


def test_numbers_never_equal_booleans() -> None:
    assert not m("1 = TRUE")
    assert m("1 <> TRUE")


def test_type_mismatch_makes_the_whole_selector_false() -> None:
    assert not m("a > 5", a="abc")
    assert not m("a > 5 OR b = 'x'", a="abc", b="x")  # evaluation stops at the mismatch
    assert m("b = 'x' OR a > 5", a="abc", b="x")  # short-circuit never reaches it
    assert not m("NOT (a > 5)", a="abc")


def test_java_double_parsing() -> None:
    assert java_double(" 1.5 ") == 1.5
    assert java_double("1e3") == 1000.0
    assert java_double("2d") == 2.0 and java_double("2F") == 2.0
    assert java_double("-Infinity") == -math.inf
    assert math.isnan(java_double("NaN"))
    assert m("a > 1.0", a="Infinity") and m("a < 1.0", a="-Infinity")
    assert m("a > 1.0", a="NaN")  # Double.compareTo sorts NaN above everything
    for bad in ("", "1_000", "inf", "nan", "0x10", "1.2.3", "١"):
        assert not m("a > 1.0", a=bad), bad


def test_negate() -> None:
    assert m("-a < 0", a="5") is False  # a negated string is unknown
    assert m("-5 < 0") and m("-5.5 < -5")
    assert m("a = -5", a="-5")


# -- evaluation: null semantics --------------------------------------------------------------
def test_missing_property_is_unknown_in_comparisons() -> None:
    for expression in ("a = 1", "a <> 1", "a > 1", "a < 1", "a BETWEEN 1 AND 2", "a NOT BETWEEN 1 AND 2"):
        assert not m(expression), expression
        assert not m(f"NOT ({expression})"), expression  # NOT unknown is unknown


def test_missing_property_in_lists_and_string_tests() -> None:
    assert not m("a IN ('x')") and not m("a NOT IN ('x')")
    assert not m("a CONTAINS 'x'") and not m("a NOT CONTAINS 'x'")
    assert m("NOT (a CONTAINS 'x')")  # CONTAINS on a missing property is FALSE, not unknown


def test_is_null() -> None:
    assert m("a IS NULL") and not m("a IS NULL", a="")
    assert m("a IS NOT NULL", a="") and not m("a IS NOT NULL")
    assert not m("5 IS NULL") and m("5 IS NOT NULL")


def test_three_valued_and_or() -> None:
    # unknown AND false = false; unknown AND true = unknown; unknown OR true = true
    assert m("NOT (a = 1 AND b = '1')", b="2")
    assert not m("NOT (a = 1 AND b = '1')", b="1")
    assert m("a = 1 OR b = '1'", b="1")
    assert not m("NOT (a = 1 OR b = '1')", b="2")


def test_both_sides_missing_are_equal() -> None:
    assert m("a = b")  # NULL = NULL is TRUE in RocketMQ's selector


def test_bare_property_is_never_true() -> None:
    assert not m("flag", flag="true")
    assert not m("flag")
    assert m("NOT flag", flag="true")  # a string is not a Boolean → FALSE → NOT is TRUE


# -- evaluation: the other operators ----------------------------------------------------------
def test_between() -> None:
    assert m("a BETWEEN 1 AND 3", a="1") and m("a BETWEEN 1 AND 3", a="3")
    assert not m("a BETWEEN 1 AND 3", a="4")
    assert m("a NOT BETWEEN 1 AND 3", a="0") and m("a NOT BETWEEN 1 AND 3", a="4")
    assert not m("a NOT BETWEEN 1 AND 3", a="2")
    assert m("a BETWEEN 1 AND 1", a="1")
    assert m("a NOT BETWEEN 3 AND 1", a="2")  # no order check for NOT BETWEEN


def test_in() -> None:
    assert m("a IN ('x', 'y')", a="y") and not m("a IN ('x', 'y')", a="z")
    assert m("a NOT IN ('x', 'y')", a="z") and not m("a NOT IN ('x')", a="x")
    many = ", ".join(f"'v{i}'" for i in range(50))
    assert m(f"a IN ({many})", a="v49")


def test_string_tests() -> None:
    assert m("a CONTAINS 'bc'", a="abcd") and not m("a CONTAINS 'x'", a="abcd")
    assert m("a NOT CONTAINS 'x'", a="abcd") and not m("a NOT CONTAINS 'bc'", a="abcd")
    assert m("a STARTSWITH 'ab'", a="abcd") and not m("a STARTSWITH 'bc'", a="abcd")
    assert m("a NOT STARTSWITH 'bc'", a="abcd")
    assert m("a ENDSWITH 'cd'", a="abcd") and not m("a ENDSWITH 'ab'", a="abcd")
    assert m("a NOT ENDSWITH 'ab'", a="abcd")
    # an empty pattern is FALSE either way, as in RocketMQ
    assert not m("a CONTAINS ''", a="abc") and not m("a NOT CONTAINS ''", a="abc")
    assert not m("5 CONTAINS '5'")  # only strings


def test_quotes_and_unicode_in_literals() -> None:
    assert m("a = 'it''s'", a="it's")
    assert m("a = '中文'", a="中文")
    assert m("a = ''", a="") is True


def test_tags_property_names_the_message_tag() -> None:
    assert m("TAGS = 'TagA'", "TagA")
    assert not m("TAGS = 'TagA'", "TagB")
    assert m("TAGS IS NULL")
    assert m("TAGS IN ('A', 'B') AND a > 1", "B", a="2")
    assert m("TAGS = 'stored'", "ignored", TAGS="stored")  # a stored TAGS property wins


def test_precedence_changes_results() -> None:
    props = {"a": "1", "b": "0", "c": "0"}
    assert compile_filter("SQL92", "a = 1 OR b = 1 AND c = 1").match(None, props)
    assert not compile_filter("SQL92", "(a = 1 OR b = 1) AND c = 1").match(None, props)


def test_compiled_filters_are_cached_and_reusable() -> None:
    f1 = compile_filter("SQL92", "a > 1")
    f2 = compile_filter("sql92", "a > 1")
    assert f1 is f2
    results = [f1.match(None, {"a": str(i)}) for i in range(5)]
    assert results == [False, False, True, True, True]


def test_evaluation_with_odd_values_does_not_raise() -> None:
    f = compile_filter("SQL92", "a > 1 AND b = TRUE AND c IN ('x') AND d CONTAINS 'y' AND -e < 0")
    for value in ("", " ", "NaN", "-0", "1e309", "\x00", "true", "999999999999999999999999"):
        props = dict.fromkeys("abcde", value)
        assert f.match(None, props) in (True, False)

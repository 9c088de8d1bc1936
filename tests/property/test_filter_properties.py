"""Properties of the message filters: round trips, total evaluation, parser robustness."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support.examples import examples
from rocketq.errors import SubscriptionParseFailed
from rocketq.filter import compile_filter
from rocketq.filter.sql92 import (
    KEYWORDS,
    ORDERING_OPS,
    STRING_TESTS,
    And,
    Between,
    BoolCast,
    Compare,
    In,
    IsNull,
    Literal,
    Negate,
    Node,
    Not,
    Or,
    Property,
    StringTest,
    compile_sql92,
    is_boolean,
    parse_selector,
    render,
)
from rocketq.message import tags_code

SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAMES = st.one_of(
    st.sampled_from(["a", "b", "c", "TAGS", "x_1", "$p"]),
    st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,6}", fullmatch=True).filter(
        lambda n: n.upper() not in KEYWORDS
    ),
)
PROPS = NAMES.map(Property)
NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=(1 << 63) - 1).map(Literal),
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False).map(Literal),
)
#: text biased towards quotes and comment starters, which the renderer must escape or enclose
TEXT = st.text(st.one_of(st.sampled_from(["'", "a", " ", "-", "/", "*"]), st.characters()), max_size=8)
STRINGS = TEXT.map(Literal)
BOOL_LITERALS = st.sampled_from([Literal(True), Literal(False), Literal(None)])


def _valid_equality(left: Node, right: Node) -> bool:
    if any(isinstance(s, Literal) and s.value is None for s in (left, right)):
        return False
    both = isinstance(left, Literal) and isinstance(right, Literal)
    return not (both and is_boolean(left) and not is_boolean(right))


@st.composite
def values(draw: st.DrawFn, numeric: bool = False) -> Node:
    """A property or literal, negated zero to two times (numbers only for ordering operands)."""
    node: Node = draw(st.one_of(PROPS, NUMBERS) if numeric else st.one_of(PROPS, NUMBERS, STRINGS))
    for _ in range(draw(st.integers(0, 2))):
        node = Negate(node)
    return node


@st.composite
def boolean_trees(draw: st.DrawFn, depth: int = 3) -> Node:
    """A boolean tree the parser can produce (BoolCast only where a boolean is required)."""
    leaf = depth <= 0 or draw(st.integers(0, 2)) == 0
    kind = draw(st.integers(0, 6 if leaf else 12))
    if kind == 0:
        return draw(BOOL_LITERALS)
    if kind == 1:
        return Compare(draw(st.sampled_from(ORDERING_OPS)), draw(values(True)), draw(values(True)))
    if kind == 2:
        low, high = draw(values(True)), draw(values(True))
        negated = draw(st.booleans())
        if not negated and isinstance(low, Literal) and isinstance(high, Literal):
            assert isinstance(low.value, (int, float)) and isinstance(high.value, (int, float))
            low, high = (low, high) if low.value <= high.value else (high, low)
        return Between(draw(values(True)), low, high, negated)
    if kind == 3:
        members = draw(st.lists(TEXT, min_size=1, max_size=4))
        return In(draw(PROPS), tuple(members), draw(st.booleans()))
    sub = boolean_trees(depth - 1)
    operand = st.one_of(sub, PROPS.map(BoolCast))
    mixed = st.one_of(values(), sub) if not leaf else values()
    if kind == 4:
        return IsNull(draw(mixed), draw(st.booleans()))
    if kind == 5:
        op = draw(st.sampled_from(STRING_TESTS))
        return StringTest(op, draw(mixed), draw(TEXT), draw(st.booleans()))
    if kind in (6, 7):
        left, right = draw(mixed), draw(mixed)
        if not _valid_equality(left, right):
            return IsNull(left)
        return Compare(draw(st.sampled_from(["=", "<>"])), left, right)
    if kind == 8:
        return Not(draw(operand))
    parts = tuple(draw(st.lists(operand, min_size=2, max_size=4)))
    return And(parts) if kind in (9, 10) else Or(parts)


SELECTORS = st.one_of(boolean_trees(), PROPS.map(BoolCast))

PROPERTY_VALUES = st.one_of(
    st.text(max_size=10),
    st.integers().map(str),
    st.floats().map(str),
    st.sampled_from(["true", "TRUE", "false", "NaN", "Infinity", "-Infinity", "", " 1 ", "1L", "1e5"]),
)
PROPERTY_MAPS = st.dictionaries(
    st.sampled_from(["a", "b", "c", "TAGS", "x_1", "$p"]), PROPERTY_VALUES, max_size=6
)

TOKEN_SOUP = st.lists(
    st.sampled_from(
        [
            "a", "b", "TAGS", "(", ")", ",", "=", "<>", ">", ">=", "<", "<=", "+", "-", "NOT", "AND", "OR",
            "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "CONTAINS", "STARTSWITH", "ENDSWITH",
            "1", "0", "2.5", ".5", "1e3", "9223372036854775807", "9223372036854775808", "'x'", "'it''s'",
            "'", "--", "/*", "*/", "!", ".", "\n", "'中'",
        ]
    ),
    max_size=14,
).map(" ".join)  # fmt: skip


@SETTINGS
@given(SELECTORS)
def test_rendered_trees_parse_back_to_the_same_tree(tree: Node) -> None:
    text = render(tree)
    parsed = parse_selector(text)
    assert parsed == tree
    assert render(parsed) == text


@SETTINGS
@given(SELECTORS, PROPERTY_MAPS, st.one_of(st.none(), st.text(max_size=5)))
def test_evaluation_never_raises(tree: Node, props: dict[str, str], tags: str | None) -> None:
    f = compile_sql92(render(tree))
    assert f.match(tags, props) in (True, False)


@SETTINGS
@given(st.one_of(st.text(max_size=40), TOKEN_SOUP))
def test_parser_raises_only_subscription_parse_failed(text: str) -> None:
    try:
        f = compile_filter("SQL92", text)
    except SubscriptionParseFailed as exc:
        assert "column" in str(exc) or "characters long" in str(exc)
        return
    # whatever parses renders to text that parses to the same tree
    assert parse_selector(render(f.ast)) == f.ast  # type: ignore[attr-defined]


@SETTINGS
@given(TOKEN_SOUP, PROPERTY_MAPS)
def test_token_soup_that_parses_evaluates(text: str, props: dict[str, str]) -> None:
    try:
        f = compile_filter("SQL92", text)
    except SubscriptionParseFailed:
        return
    assert f.match(props.get("TAGS"), props) in (True, False)


@SETTINGS
@given(
    st.lists(st.text(max_size=6).filter(lambda t: "|" not in t), min_size=1, max_size=5), st.text(max_size=6)
)
def test_tag_match_implies_tags_code_match(tags: list[str], tag: str) -> None:
    try:
        f = compile_filter("TAG", " || ".join(tags))
    except SubscriptionParseFailed:
        assert all(not t.strip() for t in tags)
        return
    if f.match(tag, {}):
        assert f.match_tags_code(tags_code(tag))
    assert f.match(tag, {}) == (tag in {t.strip() for t in tags} - {""} or f.expression == "*")

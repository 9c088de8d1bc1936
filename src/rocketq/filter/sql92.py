"""SQL92 property selectors: tokenizer → recursive-descent parser → small AST → compiled predicate.

One idea: the SQL92 selector language (lexer, parser, checks, evaluator of one grammar).

The dialect is RocketMQ's ``MessageSelector.bySql`` (a JMS selector subset). Grammar, loosest first::

    selector    := or_expr
    or_expr     := and_expr ("OR" and_expr)*
    and_expr    := eq_expr ("AND" eq_expr)*
    eq_expr     := cmp_expr ("=" cmp_expr | "<>" cmp_expr | "IS" ["NOT"] "NULL")*
    cmp_expr    := unary (("<" | "<=" | ">" | ">=") unary
                         | ["NOT"] ("CONTAINS" | "STARTSWITH" | "ENDSWITH") string
                         | ["NOT"] "BETWEEN" unary "AND" unary
                         | ["NOT"] "IN" "(" string ("," string)* ")")*
    unary       := "+" unary | "-" unary | "NOT" unary | primary
    primary     := literal | identifier | "(" or_expr ")"
    literal     := 'str''ing' | 123 | 123L | 1.5 | .5 | 1e3 | TRUE | FALSE | NULL

Keywords are case-insensitive, identifiers (``[A-Za-z_$][A-Za-z0-9_$]*``) are case-sensitive property
names; ``TAGS`` names the message tag. ``--`` line and ``/* */`` block comments are skipped. As in
RocketMQ, ``NOT`` binds tighter than comparisons: write ``NOT (a > 5)``, not ``NOT a > 5``.

Checks made while parsing (each a :class:`SubscriptionParseFailed` naming the column):

=================================  ========================================================
rule                               example rejected
=================================  ========================================================
``=``/``<>`` never take NULL       ``a = NULL`` (use ``a IS NULL``)
ordering takes numbers only        ``a > 'x'``, ``a > TRUE``, ``(a = 1) > 2``
BETWEEN bounds in order            ``a BETWEEN 5 AND 1``
IN applies to a property           ``'x' IN ('x')``
AND/OR/NOT/top level are boolean   ``a = 1 AND 5``, ``'x'``
integers fit in 64 bits            ``9223372036854775808``
=================================  ========================================================

Evaluation is three-valued (TRUE, FALSE, unknown); a message matches only when the selector is TRUE.
Property values are strings, converted to the type of the literal they meet: ``a > 5`` parses ``a`` as
an integer, ``a > 5.0`` as a double, ``a = TRUE`` compares ``a`` case-insensitively with ``true``; two
strings under ``<``/``>`` are both read as doubles. A missing property is unknown (``a = 1``, ``a > 1``
and ``a IN (...)`` are unknown, ``a IS NULL`` is TRUE, ``a CONTAINS 'x'`` and ``a NOT CONTAINS 'x'``
are FALSE). A value that does not convert (``a > 5`` with ``a = 'abc'``) makes the whole selector
FALSE for that message, as on a RocketMQ broker.

Invariants: ``parse_selector(render(n)) == n`` for every tree the parser can produce; evaluation never
raises; the parser raises nothing but :class:`SubscriptionParseFailed`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from rocketq.errors import SubscriptionParseFailed

EXPRESSION_SQL92: Final = "SQL92"
TAGS_PROPERTY: Final = "TAGS"

MAX_NESTING: Final = 100  # parentheses / unary operators / chained comparisons
MAX_EXPRESSION_CHARS: Final = 65536

KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"}
)
STRING_TESTS: Final = ("CONTAINS", "STARTSWITH", "ENDSWITH")
ORDERING_OPS: Final = (">", ">=", "<", "<=")

_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1

Value: TypeAlias = bool | int | float | str | None


# -- AST ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Literal:
    """A constant; ``kind`` (null/bool/int/float/str) keeps ``1``, ``1.0`` and ``TRUE`` apart."""

    value: Value
    kind: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", _kind_name(self.value))


@dataclass(frozen=True, slots=True)
class Property:
    name: str


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A bare property where a boolean is needed (TRUE only for a Boolean value, so never for strings)."""

    operand: Property


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = <> > >= < <=
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Between:
    operand: Node
    low: Node
    high: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    operand: Property
    values: tuple[str, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class StringTest:
    op: str  # CONTAINS / STARTSWITH / ENDSWITH
    operand: Node
    pattern: str
    negated: bool = False


Node: TypeAlias = (
    Literal | Property | BoolCast | Negate | Not | And | Or | Compare | Between | In | IsNull | StringTest
)

_BOOLEAN_NODES: Final = (BoolCast, Not, And, Or, Compare, Between, In, IsNull, StringTest)


def _kind_name(value: Value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def is_boolean(node: Node) -> bool:
    """True for nodes that yield TRUE/FALSE/unknown (RocketMQ's ``BooleanExpression``)."""
    if isinstance(node, Literal):
        return node.kind in ("bool", "null")
    return isinstance(node, _BOOLEAN_NODES)


# -- rendering ------------------------------------------------------------------------------
def quote(text: str) -> str:
    """A string literal: single quotes, embedded quotes doubled."""
    return "'" + text.replace("'", "''") + "'"


def render(node: Node) -> str:
    """Canonical text of ``node``; every compound part is parenthesised, so it parses back to ``node``."""
    if isinstance(node, Literal):
        v = node.value
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return quote(v)
        return repr(v)
    if isinstance(node, Property):
        return node.name
    if isinstance(node, BoolCast):
        return node.operand.name
    if isinstance(node, Negate):
        inner = render(node.operand)
        return f"(-({inner}))" if inner.startswith("-") else f"(-{inner})"
    if isinstance(node, Not):
        return f"(NOT {render(node.operand)})"
    if isinstance(node, (And, Or)):
        word = " AND " if isinstance(node, And) else " OR "
        return "(" + word.join(render(n) for n in node.operands) + ")"
    if isinstance(node, Compare):
        return f"({render(node.left)} {node.op} {render(node.right)})"
    neg = "NOT " if getattr(node, "negated", False) else ""
    if isinstance(node, Between):
        return f"({render(node.operand)} {neg}BETWEEN {render(node.low)} AND {render(node.high)})"
    if isinstance(node, In):
        return f"({node.operand.name} {neg}IN ({', '.join(quote(v) for v in node.values)}))"
    if isinstance(node, IsNull):
        return f"({render(node.operand)} IS {neg}NULL)"
    return f"({render(node.operand)} {neg}{node.op} {quote(node.pattern)})"


# -- tokenizer ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # int float str id kw op eof
    text: str
    column: int  # 1-based
    value: Value = None


_WS = " \t\n\r\f"
_ID_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DECIMAL_RE = re.compile(r"(?:0|[1-9][0-9]*[lL]?)")
_FLOAT_RE = re.compile(
    r"(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
)
_OPERATORS = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")


def _fail(text: str, column: int, message: str) -> SubscriptionParseFailed:
    shown = text if len(text) <= 200 else text[:200] + "..."
    return SubscriptionParseFailed(f"invalid SQL92 expression at column {column}: {message} (in {shown!r})")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens ending with an ``eof`` token; raises on an unknown character."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while True:
        while i < n:
            ch = text[i]
            if ch in _WS:
                i += 1
            elif text.startswith("--", i):
                end = text.find("\n", i)
                end2 = text.find("\r", i)
                ends = [e for e in (end, end2) if e >= 0]
                i = min(ends) + 1 if ends else n
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise _fail(text, i + 1, "unterminated /* comment")
                i = end + 2
            else:
                break
        if i >= n:
            tokens.append(Token("eof", "", n + 1))
            return tokens
        ch = text[i]
        col = i + 1
        if ch == "'":
            j = i + 1
            parts: list[str] = []
            while True:
                k = text.find("'", j)
                if k < 0:
                    raise _fail(text, col, "unterminated string literal")
                parts.append(text[j:k])
                if text.startswith("''", k):
                    parts.append("'")
                    j = k + 2
                    continue
                i = k + 1
                break
            tokens.append(Token("str", text[col - 1 : i], col, "".join(parts)))
            continue
        if ch.isascii() and (ch.isdigit() or ch == "."):
            dm = _DECIMAL_RE.match(text, i)
            fm = _FLOAT_RE.match(text, i)
            dlen = dm.end() - i if dm else 0
            flen = fm.end() - i if fm else 0
            if flen > dlen:
                image = text[i : i + flen]
                value = float(image)
                if math.isinf(value):
                    raise _fail(text, col, f"number {image} is out of the double range")
                tokens.append(Token("float", image, col, value))
                i += flen
                continue
            if dlen:
                image = text[i : i + dlen]
                number = int(image.rstrip("lL"))
                if number > _INT64_MAX:
                    raise _fail(text, col, f"integer {image} does not fit in 64 bits")
                tokens.append(Token("int", image, col, number))
                i += dlen
                continue
            raise _fail(text, col, "'.' must be followed by digits")
        m = _ID_RE.match(text, i)
        if m:
            image = m.group()
            upper = image.upper()
            if upper in KEYWORDS:
                tokens.append(Token("kw", upper, col))
            else:
                tokens.append(Token("id", image, col))
            i = m.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                tokens.append(Token("op", op, col))
                i += len(op)
                break
        else:
            shown = ch if ch.isprintable() else f"U+{ord(ch):04X}"
            raise _fail(text, col, f"unexpected character {shown!r}")


# -- parser ---------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.depth = 0

    # token helpers
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def at(self, kind: str, text: str | None = None, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == kind and (text is None or tok.text == text)

    def take(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind != "eof":
            self.pos += 1
        return tok

    def fail(self, tok: Token, message: str) -> SubscriptionParseFailed:
        return _fail(self.text, tok.column, message)

    def expect(self, kind: str, text: str, what: str) -> Token:
        if not self.at(kind, text):
            raise self.fail(self.peek(), f"expected {what} but found {_describe(self.peek())}")
        return self.take()

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(tok, f"expression nests deeper than {MAX_NESTING} levels")

    # semantic checks
    def as_boolean(self, node: Node, tok: Token) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Property):
            return BoolCast(node)
        raise self.fail(tok, f"{render(node)} is not a boolean expression")

    def check_equal_operands(self, left: Node, right: Node, tok: Token) -> None:
        for side in (left, right):
            if isinstance(side, Literal) and side.value is None:
                raise self.fail(tok, f"NULL cannot be compared with '{tok.text}'; use IS NULL / IS NOT NULL")
        both_literal = isinstance(left, Literal) and isinstance(right, Literal)
        if both_literal and is_boolean(left) and not is_boolean(right):
            raise self.fail(tok, f"{render(left)} cannot be compared with {render(right)}")

    def check_ordering_operand(self, node: Node, tok: Token) -> None:
        if isinstance(node, Literal):
            if node.kind in ("int", "float"):
                return
        elif not is_boolean(node):
            return
        raise self.fail(tok, f"{render(node)} cannot be compared with '{tok.text}'; only numbers can")

    # grammar
    def parse(self) -> Node:
        first = self.peek()
        if first.kind == "eof":
            raise self.fail(first, "expression is empty")
        node = self.or_expr()
        tok = self.peek()
        if tok.kind != "eof":
            raise self.fail(tok, f"unexpected {_describe(tok)}")
        return self.as_boolean(node, first)

    def or_expr(self) -> Node:
        first = self.peek()
        node = self.and_expr()
        if not self.at("kw", "OR"):
            return node
        operands = [self.as_boolean(node, first)]
        while self.at("kw", "OR"):
            self.take()
            start = self.peek()
            operands.append(self.as_boolean(self.and_expr(), start))
        return Or(tuple(operands))

    def and_expr(self) -> Node:
        first = self.peek()
        node = self.eq_expr()
        if not self.at("kw", "AND"):
            return node
        operands = [self.as_boolean(node, first)]
        while self.at("kw", "AND"):
            self.take()
            start = self.peek()
            operands.append(self.as_boolean(self.eq_expr(), start))
        return And(tuple(operands))

    def eq_expr(self) -> Node:
        depth = self.depth
        left = self.cmp_expr()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.text in ("=", "<>"):
                self.enter(tok)
                self.take()
                right = self.cmp_expr()
                self.check_equal_operands(left, right, tok)
                left = Compare(tok.text, left, right)
            elif tok.kind == "kw" and tok.text == "IS":
                self.enter(tok)
                self.take()
                negated = self.at("kw", "NOT")
                if negated:
                    self.take()
                self.expect("kw", "NULL", "NULL after IS" + (" NOT" if negated else ""))
                left = IsNull(left, negated)
            else:
                self.depth = depth
                return left

    def cmp_expr(self) -> Node:
        depth = self.depth
        left = self.unary()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.text in ORDERING_OPS:
                self.enter(tok)
                self.take()
                right = self.unary()
                self.check_ordering_operand(left, tok)
                self.check_ordering_operand(right, tok)
                left = Compare(tok.text, left, right)
                continue
            negated = False
            word = tok
            if tok.kind == "kw" and tok.text == "NOT":
                nxt = self.peek(1)
                if nxt.kind == "kw" and nxt.text in (*STRING_TESTS, "BETWEEN", "IN"):
                    negated = True
                    self.take()
                    word = self.peek()
            if word.kind == "kw" and word.text in STRING_TESTS:
                self.enter(tok)
                self.take()
                pattern = self.string_literal(f"a string literal after {word.text}")
                left = StringTest(word.text, left, pattern, negated)
            elif word.kind == "kw" and word.text == "BETWEEN":
                self.enter(tok)
                self.take()
                low = self.unary()
                self.expect("kw", "AND", "AND between the BETWEEN bounds")
                high = self.unary()
                for part in (left, low, high):
                    self.check_ordering_operand(part, word)
                if (
                    not negated
                    and isinstance(low, Literal)
                    and isinstance(high, Literal)
                    and _java_compare(high.value, low.value) < 0
                ):
                    raise self.fail(word, f"BETWEEN bounds out of order: {render(low)} > {render(high)}")
                left = Between(left, low, high, negated)
            elif word.kind == "kw" and word.text == "IN":
                self.enter(tok)
                self.take()
                if not isinstance(left, Property):
                    raise self.fail(word, f"IN applies to a property, not to {render(left)}")
                self.expect("op", "(", "'(' after IN")
                values = [self.string_literal("a string literal in the IN list")]
                while self.at("op", ","):
                    self.take()
                    values.append(self.string_literal("a string literal in the IN list"))
                self.expect("op", ")", "',' or ')' in the IN list")
                left = In(left, tuple(values), negated)
            else:
                self.depth = depth
                return left

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("+", "-"):
            self.enter(tok)
            self.take()
            operand = self.unary()
            self.depth -= 1
            return operand if tok.text == "+" else Negate(operand)
        if tok.kind == "kw" and tok.text == "NOT":
            self.enter(tok)
            self.take()
            start = self.peek()
            operand = self.unary()
            self.depth -= 1
            return Not(self.as_boolean(operand, start))
        return self.primary()

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind in ("int", "float", "str"):
            return Literal(tok.value)
        if tok.kind == "id":
            return Property(tok.text)
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE", "NULL"):
            return Literal({"TRUE": True, "FALSE": False, "NULL": None}[tok.text])
        if tok.kind == "op" and tok.text == "(":
            self.enter(tok)
            node = self.or_expr()
            self.expect("op", ")", "')'")
            self.depth -= 1
            return node
        raise self.fail(tok, f"expected a value, a property or '(' but found {_describe(tok)}")

    def string_literal(self, what: str) -> str:
        tok = self.peek()
        if tok.kind != "str":
            raise self.fail(tok, f"expected {what} but found {_describe(tok)}")
        self.take()
        assert isinstance(tok.value, str)
        return tok.value


def _describe(tok: Token) -> str:
    if tok.kind == "eof":
        return "end of expression"
    if tok.kind == "kw":
        return f"keyword {tok.text}"
    shown = tok.text if len(tok.text) <= 40 else tok.text[:40] + "..."
    return f"{shown!r}"


def parse_selector(text: str) -> Node:
    """Parse a selector to its AST; raises :class:`SubscriptionParseFailed` with the column."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise SubscriptionParseFailed(
            f"SQL92 expression is {len(text)} characters long; the limit is {MAX_EXPRESSION_CHARS}"
        )
    return _Parser(text).parse()


# -- value semantics (RocketMQ/ActiveMQ selector coercions) ---------------------------------
class _Mismatch(Exception):
    """A value that does not convert; the whole selector is FALSE for that message."""


_JAVA_INT_RE = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE_RE = re.compile(
    r"([+-]?)(?:(NaN)|(Infinity)|((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?)"
)


def _java_int(text: str, low: int, high: int) -> int:
    if not _JAVA_INT_RE.fullmatch(text):
        raise _Mismatch
    value = int(text)
    if not low <= value <= high:
        raise _Mismatch
    return value


def java_double(text: str) -> float:
    """``Double.valueOf``: leading/trailing control characters and spaces trimmed, NaN/Infinity."""
    m = _JAVA_DOUBLE_RE.fullmatch(text.strip("".join(chr(c) for c in range(33))))
    if not m:
        raise _Mismatch
    sign, nan, inf, digits = m.groups()
    if nan:
        return math.nan
    value = math.inf if inf else float(digits)
    return -value if sign == "-" else value


def _numeric_rank(value: Value) -> int:
    """0 not a number, 1 int, 2 long, 3 double (Java's widening order)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return 0
    if isinstance(value, float):
        return 3
    return 1 if _INT32_MIN <= value <= _INT32_MAX else 2


def _from_string(text: str, rank: int) -> int | float:
    if rank == 1:
        return _java_int(text, _INT32_MIN, _INT32_MAX)
    if rank == 2:
        return _java_int(text, _INT64_MIN, _INT64_MAX)
    return java_double(text)


def _cmp_double(a: float, b: float) -> int:
    """``Double.compareTo``: NaN equals itself and sorts above everything, -0.0 < 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = math.isnan(a), math.isnan(b)
    if a_nan or b_nan:
        return 0 if a_nan and b_nan else (1 if a_nan else -1)
    sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
    return 0 if sa == sb else (-1 if sa < sb else 1)


def _cmp_numbers(a: int | float, b: int | float) -> int:
    if isinstance(a, float) or isinstance(b, float):
        return _cmp_double(float(a), float(b))
    return (a > b) - (a < b)


def _java_compare(lv: Value, rv: Value) -> int:
    """Compare two non-null values, converting the way the RocketMQ selector does; -1 if unrelated."""
    lr, rr = _numeric_rank(lv), _numeric_rank(rv)
    if lr and rr:
        assert isinstance(lv, (int, float)) and isinstance(rv, (int, float))
        return _cmp_numbers(lv, rv)
    if isinstance(lv, str):
        if isinstance(rv, str):
            return (lv > rv) - (lv < rv)
        if isinstance(rv, bool):
            return (lv.lower() == "true") - rv
        if rr:
            assert isinstance(rv, (int, float))
            return _cmp_numbers(_from_string(lv, rr), rv)
        return -1
    if isinstance(lv, bool):
        if isinstance(rv, bool):
            return lv - rv
        if isinstance(rv, str):
            raise _Mismatch  # RocketMQ fails converting this direction
        return -1
    if lr and isinstance(rv, str):
        assert isinstance(lv, (int, float))
        return _cmp_numbers(lv, _from_string(rv, lr))
    return -1


def _equal(lv: Value, rv: Value) -> bool | None:
    if lv is None:
        return True if rv is None else None
    if rv is None:
        return False
    return _java_compare(lv, rv) == 0


def _ordering(op: str, lv: Value, rv: Value) -> bool | None:
    if lv is None or rv is None:
        return None
    if isinstance(lv, str) and isinstance(rv, str):
        lv, rv = java_double(lv), java_double(rv)
    c = _java_compare(lv, rv)
    if op == ">":
        return c > 0
    if op == ">=":
        return c >= 0
    if op == "<":
        return c < 0
    return c <= 0


# -- compiler -------------------------------------------------------------------------------
Fn = Callable[[str | None, Mapping[str, str]], Value]


def _compile(node: Node) -> Fn:
    if isinstance(node, Literal):
        const = node.value
        return lambda tags, props: const
    if isinstance(node, Property):
        name = node.name
        if name == TAGS_PROPERTY:

            def tag_prop(tags: str | None, props: Mapping[str, str]) -> Value:
                v = props.get(TAGS_PROPERTY)
                return tags if v is None else v

            return tag_prop
        return lambda tags, props: props.get(name)
    if isinstance(node, BoolCast):
        inner = _compile(node.operand)

        def bool_cast(tags: str | None, props: Mapping[str, str]) -> Value:
            v = inner(tags, props)
            return None if v is None else (v if isinstance(v, bool) else False)

        return bool_cast
    if isinstance(node, Negate):
        inner = _compile(node.operand)

        def negate(tags: str | None, props: Mapping[str, str]) -> Value:
            v = inner(tags, props)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return None
            return -v

        return negate
    if isinstance(node, Not):
        inner = _compile(node.operand)

        def not_(tags: str | None, props: Mapping[str, str]) -> Value:
            v = inner(tags, props)
            return None if v is None else not v

        return not_
    if isinstance(node, And):
        parts = tuple(_compile(n) for n in node.operands)

        def and_(tags: str | None, props: Mapping[str, str]) -> Value:
            unknown = False
            for part in parts:
                v = part(tags, props)
                if v is None:
                    unknown = True
                elif not v:
                    return False
            return None if unknown else True

        return and_
    if isinstance(node, Or):
        parts = tuple(_compile(n) for n in node.operands)

        def or_(tags: str | None, props: Mapping[str, str]) -> Value:
            unknown = False
            for part in parts:
                v = part(tags, props)
                if v is None:
                    unknown = True
                elif v:
                    return True
            return None if unknown else False

        return or_
    if isinstance(node, Compare):
        left, right, op = _compile(node.left), _compile(node.right), node.op
        if op == "=":
            return lambda tags, props: _equal(left(tags, props), right(tags, props))
        if op == "<>":

            def not_equal(tags: str | None, props: Mapping[str, str]) -> Value:
                v = _equal(left(tags, props), right(tags, props))
                return None if v is None else not v

            return not_equal
        return lambda tags, props: _ordering(op, left(tags, props), right(tags, props))
    if isinstance(node, Between):
        if node.negated:
            below = Compare("<", node.operand, node.low)
            above = Compare(">", node.operand, node.high)
            return _compile(Or((below, above)))
        return _compile(And((Compare(">=", node.operand, node.low), Compare("<=", node.operand, node.high))))
    if isinstance(node, In):
        inner = _compile(node.operand)
        members = frozenset(node.values)
        negated = node.negated

        def in_(tags: str | None, props: Mapping[str, str]) -> Value:
            v = inner(tags, props)
            if not isinstance(v, str):
                return None
            return (v in members) != negated

        return in_
    if isinstance(node, IsNull):
        inner = _compile(node.operand)
        if node.negated:
            return lambda tags, props: inner(tags, props) is not None
        return lambda tags, props: inner(tags, props) is None
    inner = _compile(node.operand)
    pattern, negated = node.pattern, node.negated
    test: Callable[[str], bool]
    if node.op == "CONTAINS":
        test = lambda v: pattern in v  # noqa: E731
    elif node.op == "STARTSWITH":
        test = lambda v: v.startswith(pattern)  # noqa: E731
    else:
        test = lambda v: v.endswith(pattern)  # noqa: E731

    def string_test(tags: str | None, props: Mapping[str, str]) -> Value:
        if not pattern:
            return False
        v = inner(tags, props)
        if not isinstance(v, str):
            return False
        return test(v) != negated

    return string_test


@dataclass(frozen=True, slots=True)
class Sql92Filter:
    """A compiled SQL92 selector; immutable, thread-safe, cheap to evaluate."""

    expression: str
    ast: Node
    _predicate: Fn = field(repr=False, compare=False)
    expression_type: str = EXPRESSION_SQL92

    def match_tags_code(self, tags_code: int) -> bool:
        del tags_code  # property filters cannot be decided from the tags hash
        return True

    def match(self, tags: str | None, properties: Mapping[str, str]) -> bool:
        """True when the selector is TRUE for a message with ``tags`` and ``properties``."""
        try:
            return self._predicate(tags, properties) is True
        except _Mismatch:
            return False


@functools.lru_cache(maxsize=512)
def _compile_text(text: str) -> Sql92Filter:
    ast = parse_selector(text)
    return Sql92Filter(text, ast, _compile(ast))


def compile_sql92(expression: str | None) -> Sql92Filter:
    """Parse and compile a selector (cached by text); raises :class:`SubscriptionParseFailed`."""
    if expression is None:
        raise SubscriptionParseFailed("SQL92 expression is missing")
    if not isinstance(expression, str):
        raise SubscriptionParseFailed(f"SQL92 expression must be a string, not {type(expression).__name__}")
    return _compile_text(expression)


__all__ = [
    "EXPRESSION_SQL92",
    "KEYWORDS",
    "MAX_NESTING",
    "TAGS_PROPERTY",
    "And",
    "Between",
    "BoolCast",
    "Compare",
    "In",
    "IsNull",
    "Literal",
    "Negate",
    "Node",
    "Not",
    "Or",
    "Property",
    "Sql92Filter",
    "StringTest",
    "Token",
    "compile_sql92",
    "is_boolean",
    "java_double",
    "parse_selector",
    "quote",
    "render",
    "tokenize",
]

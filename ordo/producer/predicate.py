"""Predicates on partition columns, parsed and evaluated without Spark (``replaceWhere``).

The ``ordo`` data source's writer runs in a Python worker with no
SparkSession, yet Delta's ``replaceWhere`` takes a SQL condition: the
partitions it selects are replaced and every written row must satisfy it.
This module is a tokenizer, a recursive-descent parser with type checking,
and an evaluator of a documented subset of Spark SQL (docs/writer.md,
"replaceWhere"), evaluated on each partition's values with Spark's
three-valued logic. What it does not support is refused with the reason and
the position, never guessed; ``tests/e2e/test_replace_where.py`` checks it
against Spark's own evaluation of generated predicates (hypothesis).

The grammar (keywords case-insensitive)::

    predicate  := or EOF
    or         := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | test
    test       := value [ cmp value | IS [NOT] NULL | [NOT] IN '(' value (',' value)* ')'
                        | [NOT] BETWEEN value AND value | [NOT] LIKE 'pattern' ]
    cmp        := = | == | <> | != | < | <= | > | >= | <=>
    value      := literal | column | function '(' value (',' value)* ')' | '(' or ')'
    literal    := 'text' | "text" | [-]digits | TRUE | FALSE | NULL | DATE 'yyyy-mm-dd'
    column     := name | `quoted name`      (case-insensitive; partition columns only)
    function   := upper | lower | trim | ltrim | rtrim | length | substring | substr | concat | coalesce
                | abs | year | month | day | dayofmonth

Strings take Spark's escapes (``\\'``, ``\\"``, ``\\\\``, ``\\n``, ``\\t``,
``\\r``, ``\\b``, ``\\0``, ``\\Z``, ``\\%``/``\\_`` kept with their backslash
for LIKE, ``\\uXXXX``, octal ``\\NNN``; any other ``\\c`` is ``c``), a doubled
quote is one, and adjacent literals are joined. Types: the partition column's
(string; tinyint/smallint/int/bigint; boolean; date); a comparison joins two
values of one type (a date and a ``'yyyy-mm-dd'`` string literal compare as
dates); anything Spark would coerce otherwise (a string with a number) is
refused.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class PredicateError(ValueError):
    """A predicate this module does not read: the message names what and where."""


STRING, INT, BOOL, DATE, NULL = "string", "int", "boolean", "date", "null"
_COLUMN_TYPES = {
    "string": STRING,
    "tinyint": INT,
    "byte": INT,
    "smallint": INT,
    "short": INT,
    "int": INT,
    "integer": INT,
    "bigint": INT,
    "long": INT,
    "boolean": BOOL,
    "date": DATE,
}
SUPPORTED_TYPES = "string, tinyint, smallint, int, bigint, boolean, date"
_KEYWORDS = frozenset({"and", "or", "not", "in", "between", "is", "null", "true", "false", "like", "date"})
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class Token:
    kind: str  # "string", "number", "name", "quoted" (a backquoted name), "op", "eof"
    text: str  # the value: unescaped string, digits, name, operator
    pos: int


_OPS = ("<=>", "<=", ">=", "<>", "!=", "==", "=", "<", ">", "(", ")", ",", "-")
_SIMPLE_ESCAPES = {"0": "\0", "'": "'", '"': '"', "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "\\": "\\"}


def _string(text: str, pos: int) -> tuple[str, int]:
    """The string literal at ``text[pos]`` (its quote) unescaped as Spark does, and the position after it."""
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while True:
        if i >= len(text):
            raise PredicateError(f"unterminated string literal starting at position {pos}")
        char = text[i]
        if char == quote:
            if i + 1 < len(text) and text[i + 1] == quote:  # a doubled quote is one
                out.append(quote)
                i += 2
                continue
            return "".join(out), i + 1
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(text):
            raise PredicateError(f"unterminated string literal starting at position {pos}")
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1 : i + 4]):
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        elif nxt in "%_":
            out.append("\\" + nxt)  # kept for LIKE, as Spark keeps them
            i += 2
        else:
            out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
            i += 2


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``; ``PredicateError`` at the first character no token starts with."""
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char in "'\"":
            value, end = _string(text, i)
            if tokens and tokens[-1].kind == "string":  # adjacent literals are one: 'a' 'b' is 'ab'
                tokens[-1] = Token("string", tokens[-1].text + value, tokens[-1].pos)
            else:
                tokens.append(Token("string", value, i))
            i = end
        elif char == "`":
            j = i + 1
            name: list[str] = []
            while True:
                if j >= len(text):
                    raise PredicateError(f"unterminated backquoted name starting at position {i}")
                if text[j] == "`":
                    if j + 1 < len(text) and text[j + 1] == "`":
                        name.append("`")
                        j += 2
                        continue
                    break
                name.append(text[j])
                j += 1
            tokens.append(Token("quoted", "".join(name), i))
            i = j + 1
        elif char.isdigit():
            match = re.compile(r"\d+(?![A-Za-z0-9_.])").match(text, i)
            if match is None:
                raise PredicateError(
                    f"the number at position {i} is not an integer (decimal, exponent and suffixed literals "
                    "are not supported)"
                )
            tokens.append(Token("number", match.group(), i))
            i = match.end()
        elif char.isalpha() or char == "_":
            match = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i)
            assert match is not None
            tokens.append(Token("name", match.group(), i))
            i = match.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise PredicateError(f"unexpected character {char!r} at position {i}")
            tokens.append(Token("op", op, i))
            i += len(op)
    tokens.append(Token("eof", "", len(text)))
    return tokens


# --------------------------------------------------------------------------- the tree

Values = Mapping[str, Any]  # partition column -> typed value


@dataclass(frozen=True)
class Node:
    """One typed expression: ``type`` is STRING, INT, BOOL, DATE or NULL; ``run`` gives its value or None."""

    type: str
    run: Callable[[Values], Any]
    literal: bool = False  # a constant (a literal, or a literal negated)
    text: str = ""  # what it was written as (messages)
    column: str | None = None  # the partition column it reads, when it is one
    pins: tuple[tuple[str, str], ...] | None = None  # `col = literal` terms joined by AND: (column, value text)

    def __call__(self, values: Values) -> Any:
        return self.run(values)


def _const(kind: str, value: Any, text: str) -> Node:
    return Node(kind, lambda _v: value, True, text)


def _substring(value: str, pos: int, length: int) -> str:
    """Spark's ``substring(str, pos, len)`` (``UTF8String.substringSQL``): 1-based, negative from the end."""
    size = len(value)
    start = pos - 1 if pos > 0 else size + pos if pos < 0 else 0
    end = start + length
    start = max(start, 0)
    return "" if start >= end else value[start:end]


def _like(pattern: str, where: int) -> re.Pattern[str]:
    """Spark's LIKE pattern (escape ``\\``) as a regular expression; refused where Spark refuses it."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1] not in "_%\\":
                raise PredicateError(
                    f"the LIKE pattern at position {where} has an escape '\\' not followed by _, % or \\ "
                    "(Spark refuses it too)"
                )
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        i += 1
    return re.compile("".join(out), re.S)


def _compare(op: str, a: Any, b: Any) -> Any:
    if op == "<=>":
        return a == b if a is not None and b is not None else a is None and b is None
    if a is None or b is None:
        return None
    if op in ("=", "=="):
        return a == b
    if op in ("<>", "!="):
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def _not(a: Any) -> Any:
    return None if a is None else not a


def _and(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _binary(fn: Callable[[Any, Any], Any], a: Node, b: Node) -> Callable[[Values], Any]:
    return lambda v: fn(a(v), b(v))


# --------------------------------------------------------------------------- the parser


class _Parser:
    def __init__(self, text: str, columns: Mapping[str, tuple[str, str]], others: Sequence[str]) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.columns = columns  # lower-cased partition column -> (its name, type)
        self.others = {o.lower() for o in others}

    # token helpers
    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def keyword(self, word: str, offset: int = 0) -> bool:
        token = self.peek(offset)
        return token.kind == "name" and token.text.lower() == word

    def take(self) -> Token:
        token = self.peek()
        self.i += 1
        return token

    def expect_op(self, op: str) -> Token:
        token = self.take()
        if token.kind != "op" or token.text != op:
            raise PredicateError(f"expected {op!r} at position {token.pos}, found {self._shown(token)}")
        return token

    def expect_keyword(self, word: str) -> Token:
        token = self.take()
        if token.kind != "name" or token.text.lower() != word:
            raise PredicateError(f"expected {word.upper()} at position {token.pos}, found {self._shown(token)}")
        return token

    @staticmethod
    def _shown(token: Token) -> str:
        return "the end" if token.kind == "eof" else repr(token.text)

    # grammar
    def predicate(self, condition: bool = True) -> Node:
        node = self.or_()
        token = self.peek()
        if token.kind != "eof":
            raise PredicateError(f"unexpected {self._shown(token)} at position {token.pos}")
        if condition:
            self._boolean(node, 0)
        return node

    def _boolean(self, node: Node, pos: int) -> None:
        if node.type not in (BOOL, NULL):
            raise PredicateError(f"{node.text or 'the expression'} at position {pos} is a {node.type}, not a condition")

    def or_(self) -> Node:
        left = self.and_()
        while self.keyword("or"):
            pos = self.take().pos
            right = self.and_()
            self._boolean(left, pos)
            self._boolean(right, pos)
            a, b = left, right
            left = Node(BOOL, _binary(_or, a, b), text="OR")
        return left

    def and_(self) -> Node:
        left = self.not_()
        while self.keyword("and"):
            pos = self.take().pos
            right = self.not_()
            self._boolean(left, pos)
            self._boolean(right, pos)
            a, b = left, right
            pins = None if a.pins is None or b.pins is None else a.pins + b.pins
            left = Node(BOOL, _binary(_and, a, b), text="AND", pins=pins)
        return left

    def not_(self) -> Node:
        if self.keyword("not"):
            pos = self.take().pos
            inner = self.not_()
            self._boolean(inner, pos)
            return Node(BOOL, lambda v: _not(inner(v)), text="NOT")
        return self.test()

    def test(self) -> Node:
        left = self.value()
        token = self.peek()
        if token.kind == "op" and token.text in ("=", "==", "<>", "!=", "<", "<=", ">", ">=", "<=>"):
            self.take()
            right = self.value()
            a, b = self._unify(left, right, token)
            op = token.text
            pins = None
            if op in ("=", "=="):
                column, constant = (a, b) if b.literal else (b, a)
                if column.column is not None and constant.literal and constant(None) is not None:  # type: ignore[arg-type]
                    pins = ((column.column, _text(constant(None))),)  # type: ignore[arg-type]
            return Node(BOOL, lambda v: _compare(op, a(v), b(v)), text=f"{left.text} {op} {right.text}", pins=pins)
        if self.keyword("is"):
            self.take()
            negated = self.keyword("not")
            if negated:
                self.take()
            self.expect_keyword("null")
            return Node(BOOL, lambda v: (left(v) is None) != negated, text="IS NULL")
        negated = self.keyword("not") and (
            self.keyword("in", 1) or self.keyword("between", 1) or self.keyword("like", 1)
        )
        if negated:
            self.take()
        if self.keyword("in"):
            return self._in(left, negated)
        if self.keyword("between"):
            pos = self.take().pos
            low = self.value()
            self.expect_keyword("and")
            high = self.value()
            at = Token("op", "BETWEEN", pos)
            x1, lo = self._unify(left, low, at)
            x2, hi = self._unify(left, high, at)

            def between(v: Values) -> Any:
                got = _and(_compare(">=", x1(v), lo(v)), _compare("<=", x2(v), hi(v)))
                return _not(got) if negated else got

            return Node(BOOL, between, text="BETWEEN")
        if self.keyword("like"):
            pos = self.take().pos
            pattern = self.value()
            if not pattern.literal or pattern.type not in (STRING, NULL):
                raise PredicateError(f"LIKE at position {pos} takes a string literal pattern")
            if left.type not in (STRING, NULL):
                raise PredicateError(f"LIKE at position {pos} applies to a string, not to {left.type} {left.text}")
            text = pattern(None)  # type: ignore[arg-type]
            regex = None if text is None else _like(text, pos)

            def like(v: Values) -> Any:
                value = left(v)
                if value is None or regex is None:
                    return None
                return (regex.fullmatch(value) is None) if negated else (regex.fullmatch(value) is not None)

            return Node(BOOL, like, text="LIKE")
        if negated:
            raise PredicateError(f"expected IN, BETWEEN or LIKE after NOT at position {self.peek().pos}")
        return left

    def _in(self, left: Node, negated: bool) -> Node:
        pos = self.take().pos
        self.expect_op("(")
        items = [self.value()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            items.append(self.value())
        self.expect_op(")")
        at = Token("op", "IN", pos)
        pairs = [self._unify(left, item, at) for item in items]

        def member(v: Values) -> Any:
            found: Any = False
            for a, b in pairs:
                found = _or(found, _compare("=", a(v), b(v)))
                if found is True:
                    break
            return _not(found) if negated else found

        return Node(BOOL, member, text="IN")

    def _unify(self, left: Node, right: Node, at: Token) -> tuple[Node, Node]:
        """The two sides of a comparison, of one type (a date and a date-shaped string literal compare as dates)."""
        if left.type == right.type or NULL in (left.type, right.type):
            return left, right
        if left.type == DATE and right.type == STRING and right.literal:
            return left, self._as_date(right, at)
        if right.type == DATE and left.type == STRING and left.literal:
            return self._as_date(left, at), right
        raise PredicateError(
            f"{at.text} at position {at.pos} compares {left.type} {left.text} with {right.type} {right.text}: "
            "compare values of one type (Spark would cast one side; ordo refuses to guess)"
        )

    @staticmethod
    def _as_date(node: Node, at: Token) -> Node:
        text = node(None)  # type: ignore[arg-type]
        return _const(DATE, _parse_date(text, at.pos), node.text)

    def value(self) -> Node:
        token = self.take()
        if token.kind == "string":
            return _const(STRING, token.text, repr(token.text))
        if token.kind == "number":
            return _const(INT, int(token.text), token.text)
        if token.kind == "op" and token.text == "-":
            number = self.take()
            if number.kind != "number":
                raise PredicateError(f"'-' at position {token.pos} negates only an integer literal")
            return _const(INT, -int(number.text), "-" + number.text)
        if token.kind == "op" and token.text == "(":
            inner = self.or_()
            self.expect_op(")")
            return inner
        if token.kind == "quoted":
            return self._column(token)
        if token.kind == "name":
            word = token.text.lower()
            if self.peek().kind == "op" and self.peek().text == "(" and word not in _KEYWORDS:
                return self._function(token)
            if word == "true" or word == "false":
                return _const(BOOL, word == "true", word)
            if word == "null":
                return _const(NULL, None, "NULL")
            if word == "date" and self.peek().kind == "string":
                text = self.take().text
                return _const(DATE, _parse_date(text, token.pos), f"DATE {text!r}")
            if word in _KEYWORDS and word != "date":  # `date` alone is a column's name, as in Spark
                raise PredicateError(f"unexpected {token.text.upper()} at position {token.pos}")
            return self._column(token)
        raise PredicateError(f"expected a value at position {token.pos}, found {self._shown(token)}")

    def _column(self, token: Token) -> Node:
        found = self.columns.get(token.text.lower())
        if found is None:
            names = ", ".join(name for name, _ in self.columns.values())
            if token.text.lower() in self.others:
                raise PredicateError(
                    f"column {token.text!r} at position {token.pos} is not a partition column: the condition may "
                    f"name only partition columns ({names})"
                )
            raise PredicateError(f"no column {token.text!r} (position {token.pos}); the partition columns: {names}")
        name, kind = found
        return Node(kind, lambda v: v[name], text=name, column=name)

    def _function(self, token: Token) -> Node:
        word = token.text.lower()
        self.expect_op("(")
        args = [self.value()]
        while self.peek().kind == "op" and self.peek().text == ",":
            self.take()
            args.append(self.value())
        self.expect_op(")")
        spec = _FUNCTIONS.get(word)
        if spec is None:
            raise PredicateError(
                f"function {token.text!r} at position {token.pos} is not supported; the functions: "
                f"{', '.join(sorted(_FUNCTIONS))}"
            )
        return spec(token, args)


def _parse_date(text: Any, pos: int) -> datetime.date | None:
    if text is None:
        return None
    try:
        if _DATE.fullmatch(text) is None:
            raise ValueError
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise PredicateError(f"the date at position {pos} is {text!r}, not a 'yyyy-mm-dd' date") from None


def _typed(token: Token, args: list[Node], kinds: Sequence[str], result: str, fn: Callable[..., Any]) -> Node:
    if len(args) != len(kinds):
        raise PredicateError(f"{token.text}() at position {token.pos} takes {len(kinds)} argument(s), not {len(args)}")
    for arg, kind in zip(args, kinds, strict=True):
        if arg.type not in (kind, NULL):
            raise PredicateError(f"{token.text}() at position {token.pos} takes a {kind}, not {arg.type} {arg.text}")

    def run(v: Values) -> Any:
        values = [a(v) for a in args]
        return None if any(x is None for x in values) else fn(*values)

    return Node(result, run, text=f"{token.text}(...)")


def _substring_fn(token: Token, args: list[Node]) -> Node:
    if len(args) == 2:
        return _typed(token, args, (STRING, INT), STRING, lambda s, p: _substring(s, p, 2**31 - 1))
    return _typed(token, args, (STRING, INT, INT), STRING, _substring)


def _concat(token: Token, args: list[Node]) -> Node:
    return _typed(token, args, [STRING] * len(args), STRING, lambda *s: "".join(s))


def _coalesce(token: Token, args: list[Node]) -> Node:
    kinds = {a.type for a in args} - {NULL}
    if len(kinds) > 1:
        raise PredicateError(f"coalesce() at position {token.pos} mixes types {sorted(kinds)}")

    def run(v: Values) -> Any:
        return next((x for x in (a(v) for a in args) if x is not None), None)

    return Node(kinds.pop() if kinds else NULL, run, text="coalesce(...)")


_FUNCTIONS: dict[str, Callable[[Token, list[Node]], Node]] = {
    "upper": lambda t, a: _typed(t, a, (STRING,), STRING, str.upper),
    "lower": lambda t, a: _typed(t, a, (STRING,), STRING, str.lower),
    "trim": lambda t, a: _typed(t, a, (STRING,), STRING, lambda s: s.strip(" ")),
    "ltrim": lambda t, a: _typed(t, a, (STRING,), STRING, lambda s: s.lstrip(" ")),
    "rtrim": lambda t, a: _typed(t, a, (STRING,), STRING, lambda s: s.rstrip(" ")),
    "length": lambda t, a: _typed(t, a, (STRING,), INT, len),
    "substring": _substring_fn,
    "substr": _substring_fn,
    "concat": _concat,
    "coalesce": _coalesce,
    "abs": lambda t, a: _typed(t, a, (INT,), INT, abs),
    "year": lambda t, a: _typed(t, a, (DATE,), INT, lambda d: d.year),
    "month": lambda t, a: _typed(t, a, (DATE,), INT, lambda d: d.month),
    "day": lambda t, a: _typed(t, a, (DATE,), INT, lambda d: d.day),
    "dayofmonth": lambda t, a: _typed(t, a, (DATE,), INT, lambda d: d.day),
}


# --------------------------------------------------------------------------- the API


@dataclass(frozen=True)
class PartitionPredicate:
    """A parsed condition on partition columns: ``matches(partition)`` for a partition's value texts."""

    text: str
    columns: tuple[tuple[str, str], ...]  # (partition column, its type: STRING, INT, BOOL, DATE)
    node: Node

    def evaluate(self, partition: Mapping[str, str]) -> Any:
        """The condition on one partition (its values as ordo writes them: Spark's ``cast(... as string)``):
        True, False or None (an ``expression``'s value, of its type)."""
        values: dict[str, Any] = {}
        for name, kind in self.columns:
            values[name] = _typed_value(kind, partition[name])
        return self.node(values)

    def matches(self, partition: Mapping[str, str]) -> bool:
        """True when the condition holds (SQL's WHERE: false and null do not select)."""
        return self.evaluate(partition) is True

    def pinned(self) -> dict[str, str] | None:
        """The one partition the condition names when it is ``col = literal`` on every partition column joined by
        AND (value texts as ordo writes them), else None."""
        pins = self.node.pins
        if pins is None:
            return None
        found: dict[str, str] = {}
        for column, value in pins:
            if found.setdefault(column, value) != value:
                return None  # a contradiction: no partition
        return found if set(found) == {name for name, _ in self.columns} else None


def _text(value: Any) -> str:
    """A value as ordo writes partition values (Spark's ``cast(... as string)``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def _typed_value(kind: str, text: str | None) -> Any:
    if text is None:
        return None
    if kind == INT:
        return int(text)
    if kind == BOOL:
        return text == "true"
    if kind == DATE:
        return datetime.date.fromisoformat(text)
    return text


def parse_predicate(
    text: str,
    partition_columns: Sequence[tuple[str, str]],
    other_columns: Sequence[str] = (),
    *,
    condition: bool = True,
) -> PartitionPredicate:
    """Parse ``text`` against the partition columns ``[(name, DDL type)]``; ``PredicateError`` naming the problem.

    ``other_columns`` are the table's other columns, named in the message when the condition uses one.
    ``condition=False`` takes any value of the grammar, not only a condition (the property test compares
    values with Spark's).
    """
    if not isinstance(text, str) or not text.strip():
        raise PredicateError("the condition is empty")
    columns: dict[str, tuple[str, str]] = {}
    for name, type_text in partition_columns:
        kind = _COLUMN_TYPES.get(type_text.strip().lower())
        if kind is None:
            raise PredicateError(
                f"partition column {name!r} has type {type_text}; conditions read partition columns of type "
                f"{SUPPORTED_TYPES}"
            )
        columns[name.lower()] = (name, kind)
    try:
        node = _Parser(text, columns, other_columns).predicate(condition)
    except RecursionError:
        raise PredicateError("the condition nests too deeply") from None
    return PartitionPredicate(text, tuple(columns.values()), node)


__all__ = ["SUPPORTED_TYPES", "PartitionPredicate", "PredicateError", "parse_predicate", "tokenize"]

"""SyntaxGym's prediction formulas: a small language of region surprisals, parsed into a tree
that is evaluated per item. Nothing in a formula is ever run as code.

A prediction states how the surprisals of regions relate across conditions, e.g.
``[(7;%match_sing%) < (7;%mismatch_sing%)] & [(7;%match_plural%) < (7;%mismatch_plural%)]``.
The grammar is the one of the ``syntaxgym`` package (0.6.0, ``prediction.py``), read from its
definition and written here anew:

- ``(N;%condition%)``: the surprisal of region ``N`` in ``condition`` (the region's tokens
  combined by the suite's metric); ``(*;%condition%)``: the sum of the values of all the
  condition's regions. A condition name is ASCII letters, digits, ``_`` and ``-``; spaces may
  stand around the parts, but ``;%`` is one symbol;
- numbers: ``2``, ``-1``, ``0.5``, ``1e-3`` (a sign only where a value is expected);
- three levels of binding, tightest first, each read left to right: ``+`` ``-`` (values), then
  one comparison ``<`` ``>`` ``=`` (two values give a truth), then ``&`` ``|`` (truths; the
  two share one level, so ``a & b | c`` is ``(a & b) | c`` and ``a | b & c`` is
  ``(a | b) & c``, as the package reads them);
- grouping by ``( ... )``, as the package writes it, or ``[ ... ]``, as the published suites
  write it.

``a = b`` holds when ``|a - b| <= 1e-3 + 1e-5 * |b|`` (the package's tolerances,
``numpy.isclose``'s rule: an absolute and a relative part, the relative one scaled by the right
side); ``<`` and ``>`` are strict. A value that is not a number (the mean of an empty region)
makes every comparison false.

Stricter than the package, on purpose: a chain of comparisons (``a < b < c``, which the package
reads as ``a < b``, dropping the rest silently), truths added or compared, values joined by
``&``/``|``, and a formula that is a value rather than a truth are refused when the suite is
read, each with one line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

#: the package's tolerances for ``=`` (syntaxgym 0.6.0, ``EQUALITY_ATOL`` / ``EQUALITY_RTOL``)
EQUALITY_ATOL = 1e-3
EQUALITY_RTOL = 1e-5

#: a region reference, spaces allowed around its parts (``;%`` is one symbol)
REGION = re.compile(r"\(\s*(\d+|\*)\s*;%\s*([A-Za-z0-9_-]+)\s*%\s*\)")
#: a number literal, with an optional sign (read only where a value is expected)
NUMBER = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
SYMBOLS = "()[]+-<>=&|"
CLOSING = {"(": ")", "[": "]"}
#: the tokens after which a value comes (where ``-1`` is a number, not a subtraction)
VALUE_BEFORE = frozenset("([+-<>=&|")


def close(left: float, right: float) -> bool:
    """``left = right`` within the package's tolerances (``numpy.isclose`` with ``atol=1e-3``,
    ``rtol=1e-5``): ``|left - right| <= atol + rtol * |right|``; equal infinities are equal and a
    value that is not a number equals nothing."""
    if math.isnan(left) or math.isnan(right):
        return False
    if math.isinf(left) or math.isinf(right):
        return left == right
    return abs(left - right) <= EQUALITY_ATOL + EQUALITY_RTOL * abs(right)


class FormulaError(ValueError):
    """A formula that does not parse or does not make sense; the message says where."""


# ----------------------------------------------------------------------------- the tree
@dataclass(frozen=True)
class RegionValue:
    """``(region;%condition%)``; ``region`` None for ``*`` (all of the condition's regions)."""

    region: int | None
    condition: str

    def __str__(self) -> str:
        return f"({'*' if self.region is None else self.region};%{self.condition}%)"


@dataclass(frozen=True)
class Number:
    value: float
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Operation:
    """A binary operation: ``+ -`` on values, ``< > =`` from values to a truth, ``& |`` on
    truths."""

    operator: str
    left: Expression
    right: Expression

    def __str__(self) -> str:
        return f"[{self.left} {self.operator} {self.right}]"


Expression = RegionValue | Number | Operation
ARITHMETIC, COMPARISON, LOGIC = ("+", "-"), ("<", ">", "="), ("&", "|")


def is_truth(expression: Expression) -> bool:
    return isinstance(expression, Operation) and expression.operator not in ARITHMETIC


def references(expression: Expression) -> Iterator[RegionValue]:
    """The region references of a formula, left to right."""
    stack = [expression]
    while stack:
        node = stack.pop()
        if isinstance(node, RegionValue):
            yield node
        elif isinstance(node, Operation):
            stack += [node.right, node.left]


# ----------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class _Token:
    kind: str  # "region", "number" or the symbol itself
    text: str
    at: int  # character offset in the formula
    value: Expression | None = None


def _tokens(text: str) -> list[_Token]:
    """The formula's tokens; a number takes its sign only where a value is expected (at the
    start, after an operator or an opening bracket)."""
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        expects_value = not tokens or tokens[-1].kind in VALUE_BEFORE
        region = REGION.match(text, position)
        number = NUMBER.match(text, position)
        if region:
            number_text, condition = region.groups()
            value = RegionValue(None if number_text == "*" else int(number_text), condition)
            tokens.append(_Token("region", region.group(), position, value))
            position = region.end()
        elif number and (expects_value or text[position] not in "+-"):
            literal = number.group()
            tokens.append(_Token("number", literal, position, Number(float(literal), literal)))
            position = number.end()
        elif text[position] in SYMBOLS:
            tokens.append(_Token(text[position], text[position], position))
            position += 1
        elif text[position] in ";%":
            raise FormulaError(
                f"unexpected {text[position]!r} at character {position + 1}: a region is written "
                "(N;%condition%), ';%' together, the condition of letters, digits, _ and -"
            )
        else:
            raise FormulaError(
                f"unexpected {text[position]!r} at character {position + 1}: a formula holds "
                "regions (N;%condition%), numbers, + - < > = & | and brackets"
            )
    return tokens


class _Parser:
    """Recursive descent over the three levels of the module docstring."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.next = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.next] if self.next < len(self.tokens) else None

    def where(self) -> str:
        token = self.peek()
        return "at the end" if token is None else f"at character {token.at + 1} ({token.text!r})"

    def parse(self) -> Expression:
        if not self.tokens:
            raise FormulaError("the formula is empty")
        expression = self.logic()
        if self.peek() is not None:
            raise FormulaError(f"unexpected {self.where()}: an operator or the end was expected")
        if not is_truth(expression):
            raise FormulaError(
                "the formula is a value, not a prediction: compare it (< > =) with another"
            )
        return expression

    def logic(self) -> Expression:
        left = self.comparison()
        while (token := self.peek()) is not None and token.kind in LOGIC:
            self.next += 1
            right = self.comparison()
            for side in (left, right):
                if not is_truth(side):
                    raise FormulaError(
                        f"{token.text!r} at character {token.at + 1} joins truths (comparisons), "
                        f"but {side} is a value"
                    )
            left = Operation(token.kind, left, right)
        return left

    def comparison(self) -> Expression:
        left = self.arithmetic()
        token = self.peek()
        if token is None or token.kind not in COMPARISON:
            return left
        self.next += 1
        right = self.arithmetic()
        for side in (left, right):
            if is_truth(side):
                raise FormulaError(
                    f"{token.text!r} at character {token.at + 1} compares values, but {side} is "
                    "a truth"
                )
        after = self.peek()
        if after is not None and after.kind in COMPARISON:
            raise FormulaError(
                f"a chain of comparisons at character {after.at + 1}: write "
                "[a < b] & [b < c] instead of a < b < c"
            )
        return Operation(token.kind, left, right)

    def arithmetic(self) -> Expression:
        left = self.operand()
        while (token := self.peek()) is not None and token.kind in ARITHMETIC:
            self.next += 1
            right = self.operand()
            for side in (left, right):
                if is_truth(side):
                    raise FormulaError(
                        f"{token.text!r} at character {token.at + 1} adds values, but {side} is "
                        "a truth"
                    )
            left = Operation(token.kind, left, right)
        return left

    def operand(self) -> Expression:
        token = self.peek()
        if token is None or token.kind not in ("region", "number", *CLOSING):
            raise FormulaError(
                f"a region (N;%condition%), a number or a bracket was expected {self.where()}"
            )
        self.next += 1
        if token.value is not None:
            return token.value
        inner = self.logic()
        closing = self.peek()
        if closing is None or closing.kind != CLOSING[token.kind]:
            raise FormulaError(
                f"{token.text!r} at character {token.at + 1} is not closed: "
                f"{CLOSING[token.kind]!r} was expected {self.where()}"
            )
        self.next += 1
        return inner


def parse_formula(text: str) -> Expression:
    """The tree of a prediction formula; a `FormulaError` says what is wrong and where."""
    return _Parser(text).parse()


# ----------------------------------------------------------------------------- evaluating
def value_of(expression: Expression, values: Mapping[tuple[str, int], float]) -> float | bool:
    """The formula's value for one item: ``values[(condition, region)]`` is a region's
    combined surprisal. ``*`` adds up a condition's regions in their order."""
    if isinstance(expression, Number):
        return expression.value
    if isinstance(expression, RegionValue):
        if expression.region is not None:
            return values[(expression.condition, expression.region)]
        return sum(value for (name, _), value in values.items() if name == expression.condition)
    left = value_of(expression.left, values)
    right = value_of(expression.right, values)
    match expression.operator:
        case "+":
            return left + right
        case "-":
            return left - right
        case "<":
            return left < right
        case ">":
            return left > right
        case "=":
            return close(left, right)
        case "&":
            return bool(left and right)
        case _:  # "|"
            return bool(left or right)

"""ListOps rules (Nangia and Bowman 2018): the operators' semantics, an evaluator, and a seeded
generator that makes STAND-IN data when the released files cannot be downloaded.

A generated set follows the documented rules of the original ``make_data.py`` (see
``data/listops/SOURCE.md``) but it is NOT the ListOps benchmark: how the released ``d20s`` files
were filtered and split is not documented, so numbers on a stand-in are not comparable with the
papers'. Files written here are named ``standin_*``.

Rules: ``generate(depth)`` starts at depth 1. Below ``MAX_DEPTH`` draw ``r ~ U[0, 1)``, at it
``r = 1``; if ``r > VALUE_P`` the node is a random digit, otherwise draw
``n ~ randint(2, MAX_ARGS)``, generate the ``n`` children at ``depth + 1`` and then pick the
operator uniformly. A list ``[OP a b c ]`` is printed as the left-branching binary tree
``( ( ( ( [OP a ) b ) c ) ] )``.
Semantics: MIN, MAX, MED (median; for an even count the mean of the two middle values, truncated)
and SM (sum modulo 10).

Command line: ``python -m treernn.data.listops_generator --num-examples 1000 --seed 0 --out f.tsv``.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from treernn.files import atomic_write

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
DIGITS = tuple(str(d) for d in range(10))
VALUE_P = 0.25
MAX_ARGS = 5
MAX_DEPTH = 20

STANDIN_WARNING = (
    "ListOps STAND-IN: generated with the documented rules, not the released benchmark; "
    "accuracies on it are not comparable with published ListOps numbers."
)


def apply_operator(operator: str, values: Sequence[int]) -> int:
    """The value of ``[OP values... ]``."""
    if not values:
        raise ValueError(f"{operator} has no arguments")
    if operator == "[MIN":
        return min(values)
    if operator == "[MAX":
        return max(values)
    if operator == "[SM":
        return sum(values) % 10
    if operator == "[MED":
        ordered = sorted(values)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) // 2  # int(numpy.median(...)), values >= 0
    raise ValueError(f"unknown ListOps operator {operator!r}")


def evaluate_listops(tokens: Iterable[str]) -> int:
    """Value of a ListOps expression given as tokens (parentheses, if present, are ignored).

    ``[MAX 2 9 [MIN 4 7 ] 0 ]`` -> 9. Iterative, so any depth works. ``ValueError`` when malformed.
    """
    stack: list[tuple[str, list[int]]] = []  # open lists: (operator, values so far)
    result: int | None = None
    for token in tokens:
        if token in ("(", ")"):
            continue
        if result is not None:
            raise ValueError(f"token {token!r} after the end of the expression")
        if token in OPERATORS:
            stack.append((token, []))
        elif token == CLOSE:
            if not stack:
                raise ValueError("']' closes no list")
            operator, values = stack.pop()
            value = apply_operator(operator, values)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
        elif token in DIGITS:
            if stack:
                stack[-1][1].append(int(token))
            else:
                result = int(token)
        else:
            raise ValueError(f"unknown ListOps token {token!r}")
    if stack:
        raise ValueError(f"{len(stack)} list(s) never closed")
    if result is None:
        raise ValueError("empty expression")
    return result


@dataclass(frozen=True)
class Node:
    """A generated list: operator and children (ints are digits)."""

    operator: str
    children: tuple[int | Node, ...]


ListOpsTree: TypeAlias = int | Node


def generate_tree(rng: random.Random, depth: int = 1) -> ListOpsTree:
    """One random expression, drawn as the original generator does (children before operator)."""
    r = rng.random() if depth < MAX_DEPTH else 1.0
    if r > VALUE_P:
        return rng.randint(0, 9)
    num_args = rng.randint(2, MAX_ARGS)
    children = tuple(generate_tree(rng, depth + 1) for _ in range(num_args))
    return Node(rng.choice(OPERATORS), children)


def tree_value(tree: ListOpsTree) -> int:
    if isinstance(tree, int):
        return tree
    return apply_operator(tree.operator, [tree_value(child) for child in tree.children])


def render(tree: ListOpsTree) -> str:
    """The released files' format: each list as a left-branching binary bracketing."""
    if isinstance(tree, int):
        return str(tree)
    text = f"( {tree.operator} {render(tree.children[0])} )"
    for child in tree.children[1:]:
        text = f"( {text} {render(child)} )"
    return f"( {text} {CLOSE} )"


def generate_examples(
    num_examples: int,
    seed: int = 0,
    unique: bool = True,
    min_tokens: int = 1,
    max_tokens: int | None = None,
    max_attempts_factor: int = 100,
) -> list[tuple[int, str]]:
    """``num_examples`` (label, bracketed expression) pairs, in generation order.

    ``unique`` keeps distinct expressions only (the original collects a set). ``min_tokens`` /
    ``max_tokens`` filter on the number of non-parenthesis tokens.
    """
    rng = random.Random(seed)
    examples: list[tuple[int, str]] = []
    seen: set[str] = set()
    attempts = 0
    while len(examples) < num_examples:
        attempts += 1
        if attempts > max_attempts_factor * max(num_examples, 100):
            raise RuntimeError(
                f"could not draw {num_examples} examples with {min_tokens} <= length <= "
                f"{max_tokens} (got {len(examples)}); relax the length limits"
            )
        tree = generate_tree(rng)
        text = render(tree)
        length = sum(token not in ("(", ")") for token in text.split())
        if length < min_tokens or (max_tokens is not None and length > max_tokens):
            continue
        if unique:
            if text in seen:
                continue
            seen.add(text)
        examples.append((tree_value(tree), text))
    return examples


def write_examples(path: str | Path, examples: Iterable[tuple[int, str]]) -> Path:
    """Write ``label<TAB>expression`` lines (the released format) atomically, through a temporary
    file of this process's own: the jobs of a sweep that draw the same stand-in at the same time
    each write theirs and rename it into place (the same contents; a shared temporary name made
    one job's rename fail)."""
    text = "".join(f"{label}\t{expression}\n" for label, expression in examples)
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))
    return Path(path)


def standin_file_name(num_examples: int, seed: int, min_tokens: int, max_tokens: int | None) -> str:
    limit = "" if max_tokens is None else f"_max{max_tokens}"
    return f"standin_train_n{num_examples}_seed{seed}_min{min_tokens}{limit}.tsv"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-examples", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-tokens", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True, help="output .tsv (name it standin_*)")
    args = parser.parse_args(argv)
    examples = generate_examples(
        args.num_examples, args.seed, min_tokens=args.min_tokens, max_tokens=args.max_tokens
    )
    write_examples(args.out, examples)
    print(f"{STANDIN_WARNING}\nwrote {len(examples)} examples to {args.out}")


if __name__ == "__main__":
    main()

"""Bounded reading of the text formats a dataset folder brings: YAML documents and shard-name
brace patterns. Both are untrusted input, and both can turn a few bytes into gigabytes.

* YAML: aliases let a 1 KB document stand for 10⁹ values (a "billion laughs" chain), and
  deep nesting makes PyYAML's recursive composer spin for minutes before a RecursionError.
  ``load_bounded_yaml`` keeps aliases (Energon files use anchors to share subflavors) but
  refuses a document whose aliases, expanded, add more than ``MAX_ALIAS_NODES`` nodes, an
  alias inside its own anchor, and nesting deeper than ``MAX_DEPTH`` (aliases expanded).
  The depth check runs while composing, so a deep document stops early.
* Brace patterns (``parts/data-{000..099}.tar``): ``braceexpand`` materialises every range
  before yielding (``{0..99999999}`` took a minute and 3.6 GB). ``expand_bounded`` counts the
  names a pattern makes with the same grammar first, and refuses more than the caller's limit
  (the number of shards the dataset has), naming the pattern.
"""

from __future__ import annotations

import re
import string
from typing import Any

import yaml

from energon_lite.errors import DatasetFormatError, short_repr

MAX_DEPTH = 64
MAX_ALIAS_NODES = 100_000
MAX_PATTERN_CHARS = 4096
_INT_RANGE = re.compile(r"^(-?\d{1,18})\.\.(-?\d{1,18})(?:\.\.-?(\d{1,18}))?$")
_ANY_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d{1,18}))?$")
_SPECIAL = re.compile(r"[{}\\]")  # what braceexpand interprets
_ALPHABET = string.ascii_uppercase + string.ascii_lowercase


class YAMLBoundError(yaml.MarkedYAMLError):
    """A well-formed YAML document past one of the bounds above."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting limit while composing and an alias budget."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YAMLBoundError(
                    problem=f"nested deeper than {MAX_DEPTH} levels",
                    problem_mark=self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_expansion(node)
        return node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse recursive aliases, too deep or too large documents once aliases are expanded."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # iterative post-order walk: aliased nodes are measured once
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            height[key] = 1 + max((height[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if height[key] > MAX_DEPTH:
                raise YAMLBoundError(
                    problem=f"nested deeper than {MAX_DEPTH} levels once aliases are expanded",
                    problem_mark=node.start_mark,
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise YAMLBoundError(
                problem="an alias inside its own anchor (a recursive document)",
                problem_mark=node.start_mark,
            )
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)
    added = size[id(root)] - len(size)
    if added > MAX_ALIAS_NODES:
        raise YAMLBoundError(
            problem=f"aliases expand the document by {added} values, more than "
            f"{MAX_ALIAS_NODES} (a YAML bomb?); write the values out or use fewer aliases",
            problem_mark=root.start_mark,
        )


def load_bounded_yaml(text: str) -> Any:
    """``yaml.safe_load`` within the bounds above (raises yaml.YAMLError past them)."""
    return yaml.load(text, Loader=_BoundedLoader)


def count_names(pattern: str) -> int:
    """How many strings ``braceexpand(pattern)`` yields, without making them."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"longer than {MAX_PATTERN_CHARS} characters")
    return _count_pattern(pattern, 0)


def _count_pattern(pattern: str, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise ValueError(f"braces nested deeper than {MAX_DEPTH} levels")
    start = pos = brackets = 0
    total = 1
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            if brackets == 0:
                start = pos
            brackets += 1
        elif char == "}":
            brackets -= 1
            if brackets == 0:
                expr = pattern[start + 1 : pos]
                count = _count_expression(expr, depth + 1)
                total *= _count_pattern(expr, depth + 1) if count is None else count
        pos += 1
    if brackets != 0:
        raise ValueError("unbalanced braces")
    return total


def _count_expression(expr: str, depth: int) -> int | None:
    """Names of a ``{...}`` group: a range, a comma list, or None (literal braces)."""
    match = _INT_RANGE.match(expr)
    if match:
        first, last, step = (int(g) if g else None for g in match.groups())
        assert first is not None and last is not None
        return abs(last - first) // (step or 1) + 1
    if _ANY_INT_RANGE.match(expr):
        raise ValueError("a numeric range with numbers of more than 18 digits")
    match = _CHAR_RANGE.match(expr)
    if match:
        first_c, last_c, step_c = match.groups()
        letters = abs(_ALPHABET.index(last_c) - _ALPHABET.index(first_c))
        return letters // (int(step_c) or 1 if step_c else 1) + 1
    parts, start, pos, brackets = [], 0, 0, 0
    while pos < len(expr):
        char = expr[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            brackets += 1
        elif char == "}":
            brackets -= 1
        elif char == "," and brackets == 0:
            parts.append(expr[start:pos])
            start = pos + 1
        pos += 1
    if brackets != 0 or not parts:
        return None
    parts.append(expr[start:])
    return sum(_count_pattern(part, depth) for part in parts)


def _all_plain(patterns: list[Any], limit: int) -> bool:
    """Every pattern a plain name (a string without braces or backslashes, not too long),
    and no more than ``limit`` of them: each expands to itself."""
    if len(patterns) > limit or not all(type(p) is str for p in patterns):
        return False
    joined = "\n".join(patterns)
    return (
        _SPECIAL.search(joined) is None and max(map(len, patterns), default=0) <= MAX_PATTERN_CHARS
    )


def expand_bounded(patterns: list[str] | str, limit: int, what: str, where: str) -> list[str]:
    """Brace-expand ``patterns`` in order; refuse more than ``limit`` names in all.

    ``what`` says what the names are and why the limit ("shards: the dataset has 10");
    errors name ``where`` (file and key) and the pattern.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list):
        raise DatasetFormatError(f"{where}: {short_repr(patterns)}; expected a list of names")
    if _all_plain(patterns, limit):  # one scan in C for a split of 100,000 plain names
        return list(patterns)
    out: list[str] = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise DatasetFormatError(f"{where}: {short_repr(pattern)} is not a name (a string)")
        if not _SPECIAL.search(pattern) and len(pattern) <= MAX_PATTERN_CHARS and len(out) < limit:
            out.append(pattern)  # a plain name (the usual case): itself, nothing to count
            continue
        try:
            count = count_names(pattern)
        except ValueError as exc:
            raise DatasetFormatError(f"{where}: pattern {short_repr(pattern)}: {exc}") from None
        if len(out) + count > limit:
            raise DatasetFormatError(
                f"{where}: pattern {short_repr(pattern)} expands to {count} names; with the "
                f"{len(out)} before it that is more than {limit} {what}"
            )
        import braceexpand  # only for brace patterns: a plain split lists names (issue 42)

        out.extend(braceexpand.braceexpand(pattern))
    return out

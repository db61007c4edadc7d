"""A fast reader for the one YAML shape ``split.yaml`` almost always has.

``prepare`` (ours and Energon's, both through ``yaml.safe_dump``) writes ``split.yaml`` as
block mappings of block lists of plain shard names::

    split_parts:
      train:
      - parts/data-0.tar
      val: []
    exclude: []

PyYAML's pure-Python parser (and the bound checks of :mod:`energon_lite.shards.bounded`) take
about 50 us per line, 0.5 s for a split of 10,000 shards, which is most of the time to open
such a dataset. ``parse_plain_lists`` reads exactly this shape line by line: top-level keys,
one nested level of keys, ``- item`` entries and ``[]``, every key and item a plain scalar
that YAML resolves to a string. Anything else (quotes, comments, flow lists with items,
anchors, a name YAML would read as a number or a date...) returns ``None`` and the caller
parses the text with the full bounded YAML loader; so the result, when there is one, is what
``yaml.safe_load`` gives. No aliases and no nesting beyond two levels: nothing to bound.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_KEY = re.compile(r"^( {0,8})([A-Za-z_][A-Za-z0-9_.-]*):( \[\])?$")
_ITEM = re.compile(r"^( {0,8})- ([A-Za-z0-9_][A-Za-z0-9_./+=@-]*)$")
_STR = "tag:yaml.org,2002:str"
_resolver = yaml.resolver.Resolver()


def _is_str(value: str) -> bool:
    # YAML's implicit bool, null, int, float and timestamp forms never hold a "/" nor end in
    # ".tar" (a float ends in a digit, "inf" or "nan"): shard names skip the resolver
    if "/" in value or value.endswith(".tar"):
        return True
    return _resolver.resolve(yaml.ScalarNode, value, (True, False)) == _STR


def parse_plain_lists(text: str) -> dict[str, Any] | None:
    """``yaml.safe_load(text)`` for mappings (one or two levels) of plain lists, else None."""
    top: dict[str, Any] = {}
    top_kind = ""  # what the last top-level key holds: "open" (not known yet), "list", "map"
    inner: dict[str, Any] = {}
    inner_indent = -1
    owner: tuple[dict[str, Any], str, int] | None = None  # a key waiting for its list
    items: list[str] | None = None  # the list being filled
    item_indent = -1
    for line in text.splitlines():
        if not line:
            continue
        item = _ITEM.match(line)
        if item is not None:
            indent, value = len(item.group(1)), item.group(2)
            if not _is_str(value):
                return None
            if items is not None and indent == item_indent:
                items.append(value)
            elif items is None and owner is not None and indent >= owner[2]:
                owner[0][owner[1]] = items = [value]
                item_indent, owner = indent, None
                top_kind = "list" if top_kind == "open" else top_kind
            else:
                return None
            continue
        key = _KEY.match(line)
        if key is None or not _is_str(key.group(2)):
            return None
        indent, name, empty = len(key.group(1)), key.group(2), key.group(3) is not None
        items, owner = None, None
        if indent == 0:
            container, top_kind = top, ("" if empty else "open")
        elif top_kind == "open" or (top_kind == "map" and indent == inner_indent):
            if top_kind == "open":
                top[next(reversed(top))] = inner = {}
                top_kind, inner_indent = "map", indent
            container = inner
        else:
            return None
        if name in container:  # YAML keeps the last of repeated keys: leave it to YAML
            return None
        container[name] = [] if empty else None  # a key with nothing under it is null
        if not empty:
            owner = (container, name, indent)
    return top or None

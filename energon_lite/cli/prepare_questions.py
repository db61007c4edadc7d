"""``energon-lite prepare`` on a terminal: ask what the flags would have said.

Each answer is checked as it is given, against the shards found, and asked again after a
mistake: a split ratio that leaves a split without a shard, a sample type that does not
exist, a part no sample of the first shard has, a ``json[key]`` that its first sample does
not resolve, an empty answer for a required field. The parts seen in the first shard are
listed with each field's question; only optional fields can be skipped.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from energon_lite.errors import ConfigError, DatasetFormatError
from energon_lite.storage import StoragePath, as_path


def ask(question: str, default: str | None = None) -> str:
    """One answer from the terminal; the default for an empty one."""
    suffix = f" [{default}]" if default else ""
    try:
        answer = input(f"{question}{suffix}: ").strip()
    except EOFError:
        raise SystemExit("input ended before every question was answered") from None
    return answer or (default or "")


def ask_until(question: str, default: str | None, check: Callable[[str], str | None]) -> str:
    """Ask until ``check(answer)`` gives no complaint; print each complaint first."""
    while True:
        answer = ask(question, default)
        complaint = check(answer)
        if complaint is None:
            return answer
        print(f"  {complaint}")


def ask_prepare_options(
    args: argparse.Namespace, parse_ratio: Callable[[str], list[tuple[str, float]]]
) -> None:
    """Fill in ``args.split_ratio``, ``args.sample_type`` and ``args.field_map``."""
    import json

    from energon_lite.samples.types import SAMPLE_TYPES, sample_field_names
    from energon_lite.shards.prepare import find_shards
    from energon_lite.shards.prepare_checks import REQUIRED_FIELDS
    from energon_lite.shards.prepare_exclude import resolve_excludes
    from energon_lite.shards.prepare_splits import check_ratio_fills_splits, split_by_ratio

    root = as_path(args.path)
    found = find_shards(root)
    if not found:
        raise DatasetFormatError(f"{root}: no .tar shards found (searched recursively)")
    excluded = resolve_excludes(args.exclude or [], found)
    left_out = set(excluded.shards)
    shards = [s for s in found if s not in left_out]
    note = f" ({len(excluded.shards)} excluded)" if excluded.shards else ""
    print(f"Found {len(found)} shards under {args.path}{note}")

    def ratio_problem(text: str) -> str | None:
        try:
            ratio = parse_ratio(text)
            check_ratio_fills_splits(split_by_ratio(shards, ratio, None), ratio, len(shards))
        except SystemExit as exc:
            return str(exc.code)
        except ConfigError as exc:
            return f"{exc}; try again"
        return None

    if not args.split_parts:
        given = args.split_ratio
        problem = ratio_problem(given) if given else "ask"
        if problem is not None:
            if given:
                print(f"  {problem}")
            args.split_ratio = ask_until("Split ratio train,val,test", "8,1,1", ratio_problem)

    names = [*sorted(SAMPLE_TYPES), "CrudeWebdataset"]
    if not args.sample_type or args.sample_type not in names:
        print("Sample types: " + ", ".join(names))
        args.sample_type = ask_until(
            "Sample type",
            "CaptioningSample",
            lambda t: None if t in names else f"{t!r} is not one of the sample types above",
        )
    if args.sample_type == "CrudeWebdataset" or args.field_map:
        return
    field_map = _ask_field_map(
        root,
        shards,
        sample_field_names(SAMPLE_TYPES[args.sample_type]),
        REQUIRED_FIELDS.get(args.sample_type, ()),
    )
    args.field_map = json.dumps(field_map)


def _ask_field_map(
    root: StoragePath, shards: list[str], fields: list[str], required: tuple[str, ...]
) -> dict[str, str]:
    from energon_lite.shards.prepare_checks import check_field_access
    from energon_lite.shards.tar_index import scan_shard
    from energon_lite.storage.ops import downloaded

    picked = sorted({round(i * (len(shards) - 1) / 3) for i in range(4)})  # first ... last
    scans = []
    for index in picked:
        with downloaded(root / shards[index]) as local:
            scans.append(scan_shard(local, display_name=str(root / shards[index])))
    first, scan = shards[picked[0]], scans[0]
    parts = sorted(set().union(*(s.parts for s in scans)))
    if not scan.parts:
        raise DatasetFormatError(
            f"{root / first}: shard holds no samples; leave it out with --exclude {first}"
        )
    where = (
        first
        if len(shards) == 1
        else f"the {len(shards)} shards"
        if len(picked) == len(shards)
        else f"{len(picked)} of the {len(shards)} shards"
    )
    print(f"Parts seen in {where}: {', '.join(parts)}")
    field_map: dict[str, str] = {}
    unseen: set[str] = set()  # answers given twice although no scanned sample has the part
    for name in fields:
        needed = name in required

        def problem(answer: str, name: str = name, needed: bool = needed) -> str | None:
            if not answer:
                return f"{name!r} is required: give one of the parts {parts}" if needed else None
            part = answer.split("[", 1)[0]
            if part not in parts and answer not in unseen:
                unseen.add(answer)
                return (
                    f"no sample of {where} has part {part!r}; parts seen: {', '.join(parts)} "
                    "(give the same answer again to use it anyway: prepare checks every shard)"
                )
            try:
                check_field_access({name: answer}, root, first, scan)
            except DatasetFormatError as exc:
                return str(exc)
            return None

        how = "required" if needed else "optional, empty to skip"
        answer = ask_until(
            f"Part for field {name!r} ({how}; parts: {', '.join(parts)}; e.g. json[caption])",
            None,
            problem,
        )
        if answer:
            field_map[name] = answer
    return field_map

"""``energon-lite``: prepare | prepare-media | info | preview | lint | bench | checkpoint
info/redist | demo (``DESCRIPTION`` is what ``--help`` prints)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from energon_lite.cli.errors import Parser, run_reporting_errors
from energon_lite.cli.words import count

if TYPE_CHECKING:
    from energon_lite.resume.ownership import LeafPlan

DESCRIPTION = (
    "energon-lite: prepare WebDataset folders and other datasets for energon_lite (and "
    "Megatron-Energon), look inside them, measure the training loader, and inspect or "
    "redistribute saved loader states. Run 'energon-lite COMMAND --help' for a command's options."
)


def _parse_ratio(text: str) -> list[tuple[str, float]]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"--split-ratio {text!r}: expected numbers like 8,1,1") from None
    if len(values) > 3:
        raise SystemExit(f"--split-ratio {text!r}: at most three parts (train,val,test)")
    return list(zip(["train", "val", "test"], values))


def _parse_split_parts(items: Sequence[str]) -> list[tuple[str, str]]:
    parts = []
    for item in items:
        name, sep, pattern = item.partition(":")
        if not sep or not name:
            raise SystemExit(
                f"--split-parts {item!r}: expected 'split:regex', e.g. 'train:parts/data-[0-7].tar'"
            )
        parts.append((name, pattern))
    return parts


def cmd_prepare(args: argparse.Namespace) -> int:
    from energon_lite.cli.meta_info import is_metadataset
    from energon_lite.cli.prepare_questions import ask, ask_prepare_options
    from energon_lite.shards.prepare import prepare_dataset
    from energon_lite.sources.kinds import kind_of

    if is_metadataset(args.path):  # as Energon's: checks it and makes each join's index
        from energon_lite.compat.metadataset_api import prepare_metadataset

        prepare_metadataset(args.path)
        print(f"Prepared metadataset {args.path}")
        print("Done")
        return 0
    kind = kind_of(args.path)
    if kind.prepare is not None:  # a dataset kind of a flavor (video-text table, episodes ...)
        if args.media_metadata_by_extension:
            raise SystemExit(
                f"{args.path}: a {kind.name} dataset stores no media metadata; remove "
                "--media-metadata-by-extension (or run prepare-media on its media folder)"
            )
        options = {
            **vars(args),
            "split_ratio": _parse_ratio(args.split_ratio) if args.split_ratio else None,
        }
        print(kind.prepare(Path(args.path), options))
        return 0

    # Energon asks unless --non-interactive; we ask on a terminal, or when no split is given
    # (then the answers may come on stdin, as Energon's tests pipe them); a script that gives
    # the split is never asked (without --sample-type it writes no dataset.yaml, as Energon's
    # --non-interactive does)
    no_split = not (args.split_ratio or args.split_parts)
    interactive = (
        not args.non_interactive and not args.tar_index_only and (sys.stdin.isatty() or no_split)
    )
    meta = Path(args.path) / ".nv-meta"
    if meta.is_dir() and not args.force_overwrite and not args.tar_index_only and interactive:
        answer = ask(f"{meta} exists: the dataset was prepared before. Overwrite it? (y/N)", "n")
        if answer.lower() not in ("y", "yes"):
            print("Nothing written.")
            return 0
        args.force_overwrite = True
    if interactive:
        ask_prepare_options(args, _parse_ratio)
    field_map = None
    if args.field_map:
        try:
            field_map = json.loads(args.field_map)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--field-map is not JSON: {exc}") from None
    report = prepare_dataset(
        args.path,
        split_ratio=_parse_ratio(args.split_ratio) if args.split_ratio else None,
        split_parts=_parse_split_parts(args.split_parts) if args.split_parts else None,
        sample_type=args.sample_type,
        field_map=field_map,
        exclude=args.exclude or [],
        num_workers=args.num_workers,
        shuffle_tars=args.shuffle_tars,
        tar_index_only=args.tar_index_only,
        force_overwrite=args.force_overwrite,
        allow_duplicate_keys=args.allow_duplicate_keys,
        dataset_yaml_name=args.dataset_yaml_name,
        executor=args.executor,
        ray_address=args.ray_address,
        progress=args.progress,
    )
    if report.resumed:
        print(f"Resumed: {report.resumed} shards' scans taken from the unfinished prepare")
    print(
        f"Prepared {count(report.num_samples, 'sample')} in "
        f"{count(len(report.shard_names), 'shard')}; parts: {', '.join(sorted(report.parts))}"
    )
    counts = dict(zip(report.shard_names, report.shard_counts))
    excluded = report.excluded
    for split, shards in report.split_parts.items():
        kept = [s for s in shards if s not in excluded.shards]
        samples = sum(counts.get(s, 0) - len(excluded.samples.get(s, ())) for s in kept)
        print(f"  {split}: {count(samples, 'sample')} in {count(len(shards), 'shard')}")
    for line in _excluded_lines(report):
        print(line)
    if args.media_metadata_by_extension and not args.tar_index_only:
        from energon_lite.cache.media_metadata import prepare_media

        recorded = prepare_media(args.path, progress=args.progress)
        print(f"Recorded media metadata of {recorded} files (by extension)")
    if not args.tar_index_only and not args.sample_type:
        print(
            f"No {args.dataset_yaml_name} written (no sample type): run prepare again with "
            "--sample-type and --field-map, or write it by hand (docs/formats.md)"
        )
    print("Done")  # Energon's last line, which scripts look for
    return 0


def _excluded_lines(report: Any) -> list[str]:
    """What --exclude left out: each entry's shards, and the samples excluded by key."""
    excluded = report.excluded
    lines = []
    if excluded.shards:
        lines.append(f"  excluded {len(excluded.shards)} shard(s), not indexed:")
        for entry, shards in excluded.matched.items():
            if shards:
                shown = ", ".join(shards[:10]) + (
                    f" ... ({len(shards)})" if len(shards) > 10 else ""
                )
                lines.append(f"    --exclude {entry!r}: {shown}")
    if excluded.num_samples:
        lines.append(
            f"  excluded {excluded.num_samples} sample(s) by key in "
            f"{len(excluded.samples)} shard(s) (split.yaml's exclude)"
        )
    return lines


def cmd_prepare_media(args: argparse.Namespace) -> int:
    from energon_lite.cache.media_metadata import prepare_media
    from energon_lite.media.extractor import MediaFilterConfig
    from energon_lite.storage import as_path

    glob, header = args.media_metadata_by_glob, args.media_metadata_by_header
    extension = args.media_metadata_by_extension or not (glob or header)
    try:
        media_filter = MediaFilterConfig.parse(glob, header, extension)
    except ValueError as exc:
        raise SystemExit(f"energon-lite prepare-media: {exc}") from None
    recorded = prepare_media(args.path, progress=sys.stderr.isatty(), media_filter=media_filter)
    print(f"Recorded media metadata of {recorded} files in {as_path(args.path) / '.nv-meta'}")
    print("Done")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from energon_lite.cli.info import dataset_info
    from energon_lite.cli.meta_info import is_metadataset, metadataset_info

    print(metadataset_info(args.path) if is_metadataset(args.path) else dataset_info(args.path))
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    from energon_lite.cli.info import preview
    from energon_lite.cli.meta_info import is_metadataset, metadataset_preview

    if is_metadataset(args.path):
        preview = metadataset_preview
    if args.grid:
        from energon_lite.cli.grid import preview_grid

        shown, width, height = preview_grid(
            args.path, args.grid, args.split_part, args.num or 16, args.columns, args.cell
        )
        print(f"wrote {args.grid}: {shown} samples of split {args.split_part}, {width}x{height}")
        return 0
    for split_part in _split_list(args.split_parts) or [args.split_part]:
        if args.split_parts:
            print(f"== {split_part}")
        for line in preview(args.path, split_part, args.num or 5):
            print(line)
    return 0


def _split_list(text: str | None) -> list[str]:
    """``--split-parts train,val`` (Energon's form) as a list."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def cmd_lint(args: argparse.Namespace) -> int:
    from energon_lite.cli.info import lint
    from energon_lite.cli.meta_info import is_metadataset, metadataset_lint

    if is_metadataset(args.path):
        lint = metadataset_lint
    problems = lint(args.path, progress=not args.quiet, split_parts=_split_list(args.split_parts))
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    """Summarise the loader states of a state file, a folder of per-rank files or a trainer
    checkpoint with the states inside (read as plain data only: no code in them runs)."""
    from energon_lite.cli.checkpoint_files import read_checkpoint
    from energon_lite.cli.info import describe_state

    found = read_checkpoint(Path(args.file), args.key)
    if found.key:
        print(f"loader state of {len(found.states)} rank(s) at key {found.where}\n")
    if found.step is not None:  # a loader's state_dict() (a trainer's or DCP checkpoint)
        print(f"step: {found.step} (batches delivered per rank)")
    paths = found.states[0].get("paths") if isinstance(found.states[0], dict) else None
    if isinstance(paths, list) and paths:
        print(f"datasets: {', '.join(str(p) for p in paths)}\n")
    many = found.one_file or len(found.states) > 1
    print(describe_state(found.states if many else found.states[0]))
    return 0


def _leaf_plans(args: argparse.Namespace, config: dict[str, Any]) -> list[LeafPlan]:
    """Each leaf's plan in the dataset the states were saved from (``--dataset``), so that
    ``redistribute`` checks every old position against the epoch's plan."""
    from energon_lite import WorkerConfig, get_train_dataset
    from energon_lite.errors import ConfigError, short_repr
    from energon_lite.pipeline.dataset_pipeline import DatasetPipeline
    from energon_lite.resume.ownership import LeafPlan

    dataset = get_train_dataset(
        args.dataset,
        split_part=args.split_part,
        worker_config=WorkerConfig(0, 1, 0, seed_offset=int(config.get("seed") or 0)),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=config.get("max_samples_per_sequence"),
        parallel_shard_iters=config.get("parallel_shard_iters"),
    )
    mine, theirs = dataset.config().get("datasets"), config.get("datasets")
    if mine != theirs:
        raise ConfigError(
            f"checkpoint redist --dataset {args.dataset} (split {args.split_part}): its "
            f"datasets {short_repr(mine)} are not the states' {short_repr(theirs)}; give the "
            "dataset or metadataset the states were saved from"
        )
    pipeline = dataset.pipeline
    assert isinstance(pipeline, DatasetPipeline)  # what get_train_dataset builds
    readers = pipeline.readers(dataset.worker_config.slot(0))
    return [LeafPlan.of(reader) for reader in readers]


def cmd_checkpoint_redist(args: argparse.Namespace) -> int:
    from energon_lite.cli.checkpoint_files import read_checkpoint, write_checkpoint
    from energon_lite.errors import ConfigError, short_repr
    from energon_lite.resume.elastic import redistribute

    paths, output = [Path(p) for p in args.paths], args.output
    energon_form: int | None = args.new_world_size
    world: int | None = args.world_size
    workers: int | None = args.num_workers
    if energon_form is not None:  # Energon's form: FILES... OUT_DIR --new-world-size N
        if world is not None or workers is not None or output is not None:
            raise ConfigError(
                "checkpoint redist: --new-world-size (Energon's form: old rank files, then the "
                "output folder) does not combine with --world-size/--num-workers/-o"
            )
        if len(paths) < 2:
            raise ConfigError(
                "checkpoint redist --new-world-size N: give the old ranks' state files (or "
                "their folder), then the output folder"
            )
        paths, output = paths[:-1], paths[-1]
    elif world is None or workers is None or output is None:
        raise ConfigError(
            "checkpoint redist: give --world-size, --num-workers and -o OUT (or Energon's "
            "--new-world-size N with the old files and the output folder)"
        )
    elif len(paths) != 1:
        raise ConfigError(
            f"checkpoint redist: one folder or file of old states, got {len(paths)} paths"
        )
    old = read_checkpoint(paths[0] if len(paths) == 1 else paths, args.key)
    config = old.states[0].get("config")
    if not isinstance(config, dict) or not isinstance(config.get("num_workers"), int):
        raise ConfigError(
            f"checkpoint redist: {paths[0]}: the loader state has no config with num_workers; "
            "is it a state from loader.save_state_rank()?"
        )
    canonical = config.get("canonical_layout")
    if canonical is not None:  # its pipelines move in the trainer, which knows the new loader
        raise ConfigError(
            f"checkpoint redist: {paths[0]}: the states are of a run with canonical_layout="
            f"{short_repr(canonical)}; pass them to loader.restore_state_global(states) on the "
            "new layout instead: it keeps the canonical global batches (with batch_size = "
            "global batch / ranks) and deals the rest exactly once on other layouts"
        )
    if energon_form is not None:  # keeps ranks x workers, as Energon's redist does
        total = len(old.states) * max(1, config["num_workers"])
        if energon_form < 1 or total % energon_form:
            raise ConfigError(
                f"checkpoint redist --new-world-size {energon_form}: {len(old.states)} ranks "
                f"x {config.get('num_workers')} workers = {total} pipelines do not split "
                f"evenly over {energon_form} ranks; use --world-size W --num-workers N for "
                "any layout"
            )
        world, workers = energon_form, total // energon_form
    assert world is not None and workers is not None  # checked above
    leaves = None if args.dataset is None else _leaf_plans(args, config)
    new = redistribute(old.states, world, workers, leaves=leaves)
    written = write_checkpoint(old, new, Path(output))
    print(
        f"redistributed {len(old.states)} ranks x {config.get('num_workers')} workers -> "
        f"{world} ranks x {workers} workers: " + ", ".join(str(p) for p in written)
    )
    if old.key:
        print(
            f"(found at key {old.where}; the new files hold the loader states only"
            + (", under the same key" if all(isinstance(k, str) for k in old.key) else "")
            + ": the rest of the trainer checkpoint is not copied)"
        )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from energon_lite.cli.demo import run_demo

    ok = run_demo(args.dir, num_samples=args.samples, steps=args.steps, num_workers=args.workers)
    return 0 if ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    from energon_lite.cli.bench import load_task_encoder, run_bench

    te = load_task_encoder(args.task_encoder) if args.task_encoder else None
    run_bench(
        args.path,
        task_encoder=te,
        num_workers=args.num_workers,
        seconds=args.seconds,
        batch_size=args.batch_size,
        split_part=args.split_part,
        out=args.out,
        progress=True,
        report_path=args.report,
    )
    return 0


def cmd_analyze_debug(args: argparse.Namespace) -> int:
    from energon_lite.cli.analyze_debug import analyze

    return analyze(
        [Path(p) for p in args.log_paths],
        Path(args.heatmap_path),
        heatmap_steps=args.heatmap_steps,
        heatmap_samples=args.heatmap_samples,
        heatmap_gain=args.heatmap_gain,
        include_modality=args.include_modality,
        skip=args.skip,
        colours=not args.no_colors,
    )


def build_parser() -> argparse.ArgumentParser:
    from energon_lite import __version__

    parser = Parser(prog="energon-lite", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"energon-lite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "prepare", help="index a WebDataset folder (.nv-meta), a .jsonl or a meta list"
    )
    p.add_argument(
        "path",
        help="a folder of .tar shards, a .jsonl, a meta list (.txt), a folder of HDF5 episodes, "
        "or a videos.csv table",
    )
    p.add_argument(
        "--non-interactive", action="store_true", help="never ask; fail on a missing option"
    )
    p.add_argument("--split-ratio", help="e.g. 8,1,1 (train,val,test), by whole shards")
    p.add_argument("--split-parts", action="append", help="'split:regex' (repeatable)")
    p.add_argument("--sample-type", help="e.g. CaptioningSample, or CrudeWebdataset")
    p.add_argument("--field-map", help='JSON, e.g. \'{"image": "jpg", "caption": "txt"}\'')
    p.add_argument(
        "--exclude",
        action="append",
        help="leave out a shard (its path in the dataset), a sample (<shard>/<sample key>), or "
        "every shard whose path matches a regex (Energon's form); repeatable",
    )
    p.add_argument("--num-workers", type=int, default=1, help="index shards in N processes (or N Ray tasks at once)")  # fmt: skip
    p.add_argument("--executor", choices=["process", "ray"], default="process",
                   help="where shards are indexed: local processes, or tasks on a Ray cluster")  # fmt: skip
    p.add_argument("--ray-address", default=None,
                   help="the Ray cluster for --executor ray (ray.init(address=...)); default: RAY_ADDRESS, else a local Ray")  # fmt: skip
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show progress bars (--no-progress: none, e.g. in logs)",
    )
    p.add_argument(
        "--media-metadata-by-extension",
        action="store_true",
        help="also record each image/audio/video part's metadata (by file extension) in "
        ".nv-meta/index.sqlite, as prepare-media does",
    )
    p.add_argument(
        "--shuffle-tars", action="store_true", help="shuffle shards before ratio splitting"
    )
    p.add_argument(
        "--tar-index-only", action="store_true", help="only (re)write the .tar.idx files"
    )
    p.add_argument(
        "--force-overwrite",
        action="store_true",
        help="overwrite an existing .nv-meta without asking (a terminal asks otherwise)",
    )
    p.add_argument(
        "--allow-duplicate-keys",
        action="store_true",
        help="accept a sample key in more than one shard (those samples are all delivered)",
    )
    p.add_argument(
        "--format",
        choices=["jsonl", "text"],
        help="a line file: JSON objects (default for .jsonl) or 'path label' lines",
    )
    p.add_argument("--media-root", help="a meta list: the folder its paths are relative to")
    p.add_argument(
        "--dataset-yaml-name",
        default="dataset.yaml",
        help="write the sample type and field map to this file in .nv-meta",
    )
    p.add_argument("--output", help="videos.csv: the index folder (default <stem>.energon)")
    p.add_argument(
        "--missing-media",
        choices=["warn", "error", "ignore"],
        default="warn",
        help="videos.csv: what a media file that does not exist does",
    )
    p.set_defaults(fn=cmd_prepare)

    p = sub.add_parser(
        "prepare-media", help="record image/audio/video metadata of a folder or tar dataset"
    )
    p.add_argument("path", help="a plain folder of media files, or a prepared tar dataset")
    p.add_argument(
        "--media-metadata-by-extension",
        action="store_true",
        help="recognise media by file extension (the default)",
    )
    p.add_argument(
        "--media-metadata-by-glob",
        metavar="PATTERNS",
        help="media are the files matching one of these comma-separated globs (e.g. '*.jpg')",
    )
    p.add_argument(
        "--media-metadata-by-header",
        action="store_true",
        help="recognise media by their first bytes (reads every file)",
    )
    p.add_argument("--num-workers", type=int, default=1, help="accepted for Energon parity")
    p.set_defaults(fn=cmd_prepare_media)

    p = sub.add_parser("info", help="sample and shard counts per split, sample type, parts")
    p.add_argument("path", help="a prepared dataset folder (any kind prepare makes)")
    p.set_defaults(fn=cmd_info)

    p = sub.add_parser("preview", help="print the first samples of a split")
    p.add_argument("path", help="a prepared dataset folder (any kind prepare makes)")
    p.add_argument("--split-part", default="train", help="the split to show (default: train)")
    p.add_argument("--split-parts", help="comma-separated splits, e.g. train,val (Energon's)")
    p.add_argument("-n", "--num", type=int, help="how many samples (default: 5, with --grid 16)")
    p.add_argument("--grid", metavar="OUT.png", help="write a picture grid with captions")
    p.add_argument("--columns", type=int, default=4, help="grid columns (default: 4)")
    p.add_argument("--cell", type=int, default=160, help="grid cell size in pixels (default: 160)")
    p.set_defaults(fn=cmd_preview)

    p = sub.add_parser("lint", help="decode every sample and report the ones that fail")
    p.add_argument("path", help="a prepared dataset folder (any kind prepare makes)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--split-parts", help="comma-separated splits to check (default: all)")
    p.set_defaults(fn=cmd_lint)

    p = sub.add_parser("bench", help="run the training pipeline a while; show where time goes")
    p.add_argument("path", help="a prepared dataset folder or a metadataset YAML")
    p.add_argument("--task-encoder", help="module:Class of your TaskEncoder (your code runs)")
    p.add_argument("--num-workers", type=int, default=2, help="worker processes (default: 2)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long (default: 10)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size (default: 32)")
    p.add_argument("--split-part", default="train", help="the split (default: train)")
    p.add_argument(
        "--out",
        default="energon-lite-bench",
        help="folder for stats.json and the PNG plots (default: ./energon-lite-bench)",
    )
    p.add_argument(
        "--report",
        metavar="OUT.html",
        help="also one self-contained HTML page with every plot, and OUT.png beside it",
    )
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser(
        "analyze-debug", help="a heatmap of which samples came at which step (debug logs)"
    )
    p.add_argument("log_paths", nargs="+", help="folders of *.jsonl debug logs, or log files")
    p.add_argument("--heatmap-path", default="heatmap.png", help="the PNG (default: heatmap.png)")
    p.add_argument("--heatmap-steps", type=int, default=1000, help="columns at most (1000)")
    p.add_argument("--heatmap-samples", type=int, default=1000, help="rows at most (1000)")
    p.add_argument("--heatmap-gain", type=float, default=10.0, help="brightness (default: 10)")
    p.add_argument(
        "--include-modality", default="train", help="train, val or train,val (default: train)"
    )
    p.add_argument("--skip", type=int, default=0, help="leave out the first N steps")
    p.add_argument("--no-colors", action="store_true", help="one colour for every rank")
    p.set_defaults(fn=cmd_analyze_debug)

    p = sub.add_parser("checkpoint", help="inspect a saved loader state")
    csub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = csub.add_parser(
        "info",
        help="summarise a state file or a trainer checkpoint with the loader state inside "
        "(msgpack, JSON or torch.save; never unpickled)",
    )
    c.add_argument(
        "file",
        help="a file written from save_state_rank()/save_state_global(), a trainer "
        "checkpoint holding such states, or a folder of per-rank files",
    )
    c.add_argument(
        "--key",
        help="where the state is inside a trainer checkpoint, e.g. dataloader or "
        "extra.loader_state (default: found in nested dicts and lists)",
    )
    c.set_defaults(fn=cmd_checkpoint)
    c = csub.add_parser(
        "redist",
        help="redistribute a checkpoint over another number of ranks and workers (elastic)",
    )
    c.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a folder of per-rank state files, or one file of all ranks; with "
        "--new-world-size: the old ranks' files (or their folder), then the output folder",
    )
    c.add_argument("--world-size", type=int, help="the new number of ranks")
    c.add_argument("--num-workers", type=int, help="the new loader workers per rank")
    c.add_argument("-o", "--output", help="the folder to write the new states to")
    c.add_argument(
        "--new-world-size",
        type=int,
        help="Energon's form: the new number of ranks, keeping ranks x workers (each "
        "worker pipeline moves whole and continues its own stream)",
    )
    c.add_argument(
        "--key",
        help="where the states are inside trainer checkpoints, e.g. dataloader_state_dict "
        "(default: found in nested dicts and lists); the new files keep that key",
    )
    c.add_argument(
        "--dataset",
        help="the dataset or metadataset the states were saved from: also checks that every "
        "old reader position is inside its epoch (without it, only overlaps between the old "
        "states are checked here, and positions when the new states are restored)",
    )
    c.add_argument("--split-part", default="train", help="the split of --dataset (default: train)")
    c.set_defaults(fn=cmd_checkpoint_redist)

    p = sub.add_parser("demo", help="prepare a small dataset, train, checkpoint and resume")
    p.add_argument("--dir", help="where to write the dataset (default: a temporary folder)")
    p.add_argument("--samples", type=int, default=2000, help="samples to write (default: 2000)")
    p.add_argument("--steps", type=int, default=80, help="training steps (default: 80)")
    p.add_argument("--workers", type=int, default=2, help="loader worker processes (default: 2)")
    p.set_defaults(fn=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every error is one line ``energon-lite CMD: error: ...`` and exit 1."""
    args = build_parser().parse_args(argv)
    return run_reporting_errors(args)

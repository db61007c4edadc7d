"""Energon's public names outside the pipeline core: sample types, edataclass, collate helpers,
error handlers, AugmentTaskEncoder, SavableDataLoader. Energon itself is the oracle where the
same code can run through both libraries."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import oracle

import energon_lite as el

energon = oracle()

SAMPLE_TYPE_NAMES = [
    "Sample",
    "TextSample",
    "ImageSample",
    "CaptioningSample",
    "ImageClassificationSample",
    "VQASample",
    "MultiChoiceVQASample",
    "VidQASample",
    "OCRSample",
    "InterleavedSample",
    "SimilarityInterleavedSample",
]


def _layout(cls: type) -> list[tuple[str, bool, bool]]:
    """(name, has a default, keyword-only) per field."""
    return [
        (
            f.name,
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
            bool(f.kw_only),
        )
        for f in dataclasses.fields(cls)
    ]


@pytest.mark.parametrize("name", SAMPLE_TYPE_NAMES)
def test_sample_types_have_energons_field_layout(name: str) -> None:
    assert _layout(getattr(el, name)) == _layout(getattr(energon, name))


def _subclasses(lib: Any) -> Any:
    """The same user code for both libraries: key fields re-declared without a default."""

    @dataclass
    class MySample(lib.Sample):
        __subflavors__: dict
        image: torch.Tensor

    @dataclass
    class MyCaption(lib.CaptioningSample):
        __subflavors__: dict
        extra: int

    return MySample, MyCaption


@pytest.mark.parametrize("lib", [el, energon], ids=["energon_lite", "energon"])
def test_redeclared_key_field_without_default(lib: Any) -> None:
    my_sample, my_caption = _subclasses(lib)
    s = my_sample(image=torch.ones(1), __key__="k", __restore_key__=("r",), __subflavors__={"a": 1})
    assert s.image.tolist() == [1.0] and s.__subflavors__ == {"a": 1}
    with pytest.raises(TypeError, match="__subflavors__"):
        my_sample(image=torch.ones(1), __key__="k", __restore_key__=())
    c = my_caption({}, 5, __key__="k", __restore_key__=(), image=1, caption="c")
    assert (c.extra, c.caption, c.__sources__) == (5, "c", None)


def test_same_subclass_code_gives_the_same_fields() -> None:
    ours, theirs = _subclasses(el), _subclasses(energon)
    for a, b in zip(ours, theirs):
        assert _layout(a) == _layout(b)


@pytest.mark.parametrize("lib", [el, energon], ids=["energon_lite", "energon"])
def test_extend_keeps_the_base_fields(lib: Any) -> None:
    @lib.edataclass
    class Extended(lib.CaptioningSample):
        score: float

    base = lib.CaptioningSample(__key__="k", __restore_key__=("x", 1), image=7, caption="c")
    ext = Extended.extend(base, score=0.5, caption="new")
    assert (ext.__key__, ext.__restore_key__, ext.image, ext.caption, ext.score) == (
        "k", ("x", 1), 7, "new", 0.5
    )  # fmt: skip
    with pytest.raises((TypeError, AssertionError)):
        lib.TextSample.extend(base, text="t")  # not a subclass of CaptioningSample


def test_edataclass_is_keyword_only_with_slots() -> None:
    @el.edataclass
    class Point:
        x: int
        y: int = 0

    p = Point(x=1)
    assert (p.x, p.y) == (1, 0) and not hasattr(p, "__dict__")
    with pytest.raises(TypeError):
        Point(1)  # type: ignore[misc]
    assert _layout(el.SourceInfo) == _layout(energon.SourceInfo)


def _structures(lib: Any) -> list[Any]:
    """Batches of different shapes, in dict, dataclass and tensor form."""

    @dataclass
    class Pair:
        a: torch.Tensor
        name: list[str]

    return [
        [torch.arange(6).reshape(2, 3), torch.arange(4).reshape(1, 4)],
        [{"x": torch.ones(2, 2), "k": ["a", "b"]}, {"x": torch.zeros(1, 3), "k": ["c"]}],
        [Pair(torch.ones(1, 2), ["p"]), Pair(torch.ones(2, 1), ["q", "r"])],
    ]


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("case", range(3))
def test_generic_concat_and_batch_match_energon(case: int) -> None:
    ours, theirs = _structures(el)[case], _structures(energon)[case]
    assert _plain(el.generic_concat(ours)) == _plain(energon.generic_concat(theirs))
    assert _plain(el.homogeneous_concat_mix(ours)) == _plain(energon.homogeneous_concat_mix(theirs))
    assert _plain(el.generic_batch(ours)) == _plain(energon.generic_batch(theirs))


def test_concat_pad_pads_and_concatenates() -> None:
    out = el.concat_pad([torch.ones(2, 1), torch.full((1, 3), 2.0)])
    assert out.tolist() == [[1, 0, 0], [1, 0, 0], [2, 2, 2]]
    with pytest.raises(TypeError):
        el.homogeneous_concat_mix([{"a": torch.ones(1)}, [torch.ones(1)]])


def test_generic_batch_uses_from_samples() -> None:
    @dataclass(kw_only=True)
    class MyBatch(el.Batch):
        caption: list[str]

    samples = [MyBatch(__key__="a", __restore_key__=(), caption="x")]
    out = el.generic_batch(samples)
    assert out.__key__ == ["a"] and out.caption == ["x"]


def test_error_handlers(caplog: pytest.LogCaptureFixture) -> None:
    source = el.SourceInfo(dataset_path="/d", index=3, shard_name="s.tar", file_names=("k.jpg",))
    sample = {"__key__": "k", "img": torch.zeros(3, 4), "raw": b"x" * 5000}
    try:
        raise ValueError("bad pixel")
    except ValueError as exc:
        with caplog.at_level(logging.ERROR, logger="energon_lite"):
            el.log_exception(exc, sample, [source])
        with pytest.raises(ValueError, match="bad pixel"):
            el.reraise_exception(exc, sample, None)
    text = caplog.text
    assert "bad pixel" in text and "/d[3] s.tar" in text and "shape=(3, 4)" in text
    assert "<5000 bytes>" in text and "Traceback" in text


def test_worker_config_stores_the_error_handlers() -> None:
    def handler(exc: Exception, sample: Any, sources: Any) -> None:
        raise exc

    wc = el.WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler=handler)
    assert wc.global_error_handler is handler
    assert wc.restore_error_handler is el.reraise_exception
    assert el.WorkerConfig(0, 1, 0).global_error_handler is el.log_exception
    ours, theirs = (
        el.WorkerConfig(1, 4, 3),
        energon.WorkerConfig(rank=1, world_size=4, num_workers=3),
    )
    assert ours.config() == theirs.config()


class _Upper(el.DefaultTaskEncoder):
    def encode_sample(self, sample: Any) -> Any:
        sample.caption = f"{sample.caption.upper()}|{int(self.sample_rng.integers(1000))}"
        return sample


class _Tagged(el.AugmentTaskEncoder):
    def encode_sample(self, sample: Any) -> Any:
        sample = super().encode_sample(sample)
        sample.caption = "<" + sample.caption + ">"
        return sample


def _captions(path: Path, te: Any) -> list[str]:
    ds = el.get_train_dataset(
        path,
        worker_config=el.WorkerConfig(0, 1, 0),
        batch_size=4,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
        task_encoder=te,
    )
    return [c for batch in el.get_loader(ds) for c in batch.caption]


def test_augment_task_encoder_wraps_the_inner_encoder(train_ds: Path) -> None:
    inner = _captions(train_ds, _Upper())
    wrapped = _captions(train_ds, _Tagged(_Upper()))
    assert len(inner) == 120 and inner[0].startswith("SAMPLE 0:")
    assert wrapped == [f"<{c}>" for c in inner]  # inner's sample_rng draws the same numbers
    te = _Tagged(_Upper())
    assert te.decoder is te._task_encoder.decoder


def test_savable_data_loader_resumes_exactly(train_ds: Path) -> None:
    def dataset() -> Any:
        return el.get_train_dataset(
            train_ds,
            worker_config=el.WorkerConfig(0, 1, 2),
            batch_size=5,
            shuffle_buffer_size=20,
            max_samples_per_sequence=5,
        )

    loader = el.SavableDataLoader(dataset(), checkpoint_every_sec=10, n_checkpoints=2)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = loader.save_state_rank()
    expected = [next(it).__key__ for _ in range(5)]
    resumed = el.SavableDataLoader(dataset())
    resumed.restore_state_rank(state)
    it2 = iter(resumed)
    assert [next(it2).__key__ for _ in range(5)] == expected
    with pytest.raises(el.ConfigError, match="cache_pool"):
        el.SavableDataLoader(dataset(), cache_pool=object())

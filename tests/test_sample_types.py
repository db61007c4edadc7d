"""``Sample`` / ``Batch`` helpers with Energon's signatures: ``derive_from(base_sample, ...)``,
``from_joined`` (Energon's default joiner) and ``basic_sample_keys(crude_sample,
additional_source_info)``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from energon_lite import Batch, Sample, SourceInfo, TextSample, basic_sample_keys


def _source(name: str) -> SourceInfo:
    return SourceInfo(dataset_path=name, index=0, shard_name=f"{name}.tar", file_names=(name,))


def _text(key: str, text: str, source: str) -> TextSample:
    return TextSample(
        __key__=key, __restore_key__=("s", key), __sources__=(_source(source),), text=text
    )


@dataclass
class Captioned(Sample):
    text: str = ""
    caption: str | None = None


def test_derive_from_keeps_the_key_fields_and_fields_given_win() -> None:
    base = _text("k1", "hello", "a")
    derived = Captioned.derive_from(base_sample=base, text="x")
    assert (derived.__key__, derived.__restore_key__, derived.text) == ("k1", ("s", "k1"), "x")
    assert derived.__sources__ == base.__sources__
    renamed = Captioned.derive_from(base, __key__="other", text="y")  # a key field given
    assert (renamed.__key__, renamed.__restore_key__) == ("other", ("s", "k1"))
    crude = {"__key__": "c", "__restore_key__": ("s", "c"), "txt": b"t"}
    assert Captioned.derive_from(crude, text="t").__key__ == "c"


def test_batch_derive_from_takes_base_batch() -> None:
    @dataclass
    class Texts(Batch):
        texts: list[str]

    batch = Texts(__key__=["a", "b"], __restore_key__=[1, 2], texts=["x", "y"])
    derived = Texts.derive_from(base_batch=batch, texts=["X", "Y"])
    assert (derived.__key__, derived.__restore_key__, derived.texts) == (
        ["a", "b"],
        [1, 2],
        ["X", "Y"],
    )


def test_basic_sample_keys_adds_additional_source_info() -> None:
    crude = {"__key__": "k", "__restore_key__": ("s", 1), "__sources__": (_source("a"),)}
    keys = basic_sample_keys(crude_sample=crude, additional_source_info=(_source("aux"),))
    assert keys["__key__"] == "k"
    assert [s.dataset_path for s in keys["__sources__"]] == ["a", "aux"]
    bare = basic_sample_keys({"__key__": "k"}, (_source("aux"),))  # no __sources__ of its own
    assert [s.dataset_path for s in bare["__sources__"]] == ["aux"]
    assert basic_sample_keys(crude)["__sources__"] == (_source("a"),)


def test_default_from_joined_merges_fields_in_join_order() -> None:
    first, second = _text("k1", "one", "a"), _text("k2", "two", "b")
    joined = TextSample.from_joined(first, second)
    # the primary's key fields, the later sample's own fields over the primary's
    assert (joined.__key__, joined.__restore_key__, joined.text) == ("k1", ("s", "k1"), "two")
    assert [s.dataset_path for s in joined.__sources__] == ["a", "b"]
    alone = TextSample.from_joined(first, None)  # a partner left out adds nothing
    assert (alone.text, [s.dataset_path for s in alone.__sources__]) == ("one", ["a"])


def test_default_from_joined_refuses_names_and_a_missing_primary() -> None:
    first = _text("k1", "one", "a")
    with pytest.raises(TypeError, match="by name \\(text1\\)"):
        TextSample.from_joined(text1=first)
    with pytest.raises(ValueError, match="primary sample"):
        TextSample.from_joined(None, first)

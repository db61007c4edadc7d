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


BUILTIN_CHECK = """
import pickle, sys
import energon_lite.samples.types as types
import energon_lite.samples as samples

def made():
    return sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("energon_lite.samples.builtin."))

print(made())  # importing the types makes none of the built-in ones
from energon_lite.samples.types import CaptioningSample
print(made())  # one, on first use
old = pickle.loads({old!r})  # a pickle naming the public path, made before
print(type(old).__name__, type(old) is samples.VQASample, made())
sample = CaptioningSample(__key__="k", __restore_key__=("s", 0), image=None, caption="c")
print(pickle.loads(pickle.dumps(sample)) == sample, CaptioningSample.__module__)
import energon_lite as el
print(el.CaptioningSample is CaptioningSample, samples.CaptioningSample is CaptioningSample)
print(list(types.SAMPLE_TYPES) == list(types.SAMPLE_TYPE_NAMES),
      types.SAMPLE_TYPES["CaptioningSample"] is CaptioningSample, len(made()))
print({{n for n in samples.__all__ if n[0].isupper()}} <= set(dir(samples)), "OCRSample" in dir(types))
"""


def test_built_in_types_are_made_on_first_use_under_their_public_path() -> None:
    """The 11 built-in sample types are made when a process first uses one (by name, from either
    package, by a pickle or through SAMPLE_TYPES), are the same object on every path, and
    keep energon_lite.samples.types as their module, so pickles made before still load."""
    import pickle
    import subprocess
    import sys

    from energon_lite.samples.types import VQASample

    old = pickle.dumps(VQASample(__key__="q", __restore_key__=("s", 1), image=None, context="?"))
    assert b"energon_lite.samples.types" in old
    code = BUILTIN_CHECK.format(old=old)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[]",
        "['captioning']",
        "VQASample True ['captioning', 'vqa']",
        "True energon_lite.samples.types",
        "True True",
        "True True 11",
        "True True",
    ]


def test_a_user_subclass_of_a_built_in_type() -> None:
    from energon_lite.samples.types import CaptioningSample

    @dataclass
    class Scored(CaptioningSample):
        score: float = 0.0

    sample = Scored(__key__="k", __restore_key__=("s", 0), image=None, caption="c", score=1.5)
    assert isinstance(sample, CaptioningSample) and isinstance(sample, Sample)
    assert (sample.caption, sample.score) == ("c", 1.5)

"""``get_train_dataset`` / ``get_val_dataset`` ``sample_type=``: Energon's typing check.

Energon (``dataset_config.get_dataset_from_config``) asserts that the loaded dataset's sample
type is ``sample_type`` or a subclass of it, for each dataset of a metadataset; nothing is
converted. energon_lite does the same and refuses a mismatch with a ConfigError naming the
dataset and both types.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from energon_lite import (
    CaptioningSample,
    CrudeSample,
    Sample,
    TextSample,
    WorkerConfig,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
    prepare_dataset,
)
from energon_lite.errors import ConfigError
from energon_lite.synth.shards import write_captioning_shards

ARGS = {"batch_size": 2, "shuffle_buffer_size": None, "max_samples_per_sequence": None}


def _train(path: Path, **kwargs):
    return get_train_dataset(path, worker_config=WorkerConfig(0, 1, 0), **{**ARGS, **kwargs})


@pytest.mark.parametrize("sample_type", [CaptioningSample, Sample, None])
def test_matching_type_or_base_class_is_accepted(train_ds: Path, sample_type) -> None:
    batch = next(iter(get_savable_loader(_train(train_ds, sample_type=sample_type))))
    assert isinstance(batch, CaptioningSample)  # checked only: nothing converted
    assert len(batch.__key__) == 2


def test_mismatch_names_the_dataset_and_both_types(train_ds: Path) -> None:
    with pytest.raises(ConfigError) as error:
        _train(train_ds, sample_type=TextSample)
    message = str(error.value)
    assert str(train_ds) in message
    assert "energon_lite.samples.types.CaptioningSample" in message
    assert "energon_lite.samples.types.TextSample" in message


@pytest.mark.parametrize("bad", ["CaptioningSample", 3])
def test_a_value_that_is_not_a_class_is_refused(train_ds: Path, bad) -> None:
    with pytest.raises(ConfigError, match=r"sample_type=.* must be a class"):
        _train(train_ds, sample_type=bad)


def test_val_dataset_checks_too(split_ds: Path) -> None:
    wc = WorkerConfig(0, 1, 0)
    ok = get_val_dataset(split_ds, worker_config=wc, batch_size=None, sample_type=Sample)
    assert isinstance(next(iter(ok)), CaptioningSample)
    with pytest.raises(ConfigError, match=r"CaptioningSample.*TextSample") as error:
        get_val_dataset(split_ds, worker_config=wc, batch_size=None, sample_type=TextSample)
    assert str(split_ds) in str(error.value)


def test_every_dataset_of_a_metadataset_is_checked(train_ds: Path, text_ds: Path, tmp_path: Path):
    yaml = tmp_path / "blend.yaml"
    yaml.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend:\n      - {{weight: 1, path: {text_ds}}}\n"
        f"      - {{weight: 1, path: {train_ds}}}\n"
    )
    assert len(_train(yaml, sample_type=Sample).pipeline.leaves) == 2
    with pytest.raises(ConfigError) as error:
        _train(yaml, sample_type=TextSample)
    assert str(train_ds) in str(error.value) and str(text_ds) not in str(error.value)


def test_crude_dataset_is_crude_sample(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 8, 4, image_size=(8, 8))
    prepare_dataset(
        tmp_path, split_ratio=[("train", 1)], sample_type="CrudeWebdataset", progress=False
    )
    sample = next(iter(_train(tmp_path, sample_type=CrudeSample, batch_size=None)))
    assert isinstance(sample, CrudeSample)
    with pytest.raises(ConfigError, match=r"CrudeSample.*CaptioningSample"):
        _train(tmp_path, sample_type=CaptioningSample)

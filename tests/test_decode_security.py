"""Decoding options and what a dataset may make us run: pickled parts are refused unless the
user allows them, dataset.yaml names only trusted classes, dataset files stay in the dataset,
and Energon's legacy top-level ``*Webdataset`` dataset.yaml loads with a deprecation warning."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import energon_lite as el
from energon_lite.cli.info import lint, preview
from energon_lite.decode import ALLOW_PICKLE_ENV, guess_extension
from energon_lite.synth.shards import make_image, write_captioning_shards


class _Payload:
    """Unpickling this creates a file: proof that code from the data ran."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.target), "w"))


def _tar(path: Path, samples: dict[str, dict[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for key, parts in samples.items():
            for ext, data in parts.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def _crude_pickle_dataset(root: Path, payload: bytes) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _tar(root / "data-0.tar", {f"s{i}": {"txt": b"hello %d" % i, "pyd": payload} for i in range(4)})
    el.prepare_dataset(
        root, split_ratio=[("train", 1)], sample_type="CrudeWebdataset", progress=False
    )
    return root


class _Cook(el.DefaultTaskEncoder):
    cookers = (el.Cooker(lambda s: el.TextSample(**el.basic_sample_keys(s), text=str(s["pyd"]))),)


def _texts(root: Path, te: Any) -> list[str]:
    ds = el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(0, 1, 0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
        task_encoder=te,
    )
    return [s.text for s in el.get_loader(ds)]


def test_pickled_parts_are_refused_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_PICKLE_ENV, raising=False)
    target = tmp_path / "pwned"
    root = _crude_pickle_dataset(tmp_path / "ds", pickle.dumps(_Payload(target)))
    with pytest.raises(el.ConfigError) as info:
        _texts(root, _Cook())
    message = str(info.value)
    assert "allow_pickle=True" in message and f"{ALLOW_PICKLE_ENV}=1" in message
    assert "pyd" in message and "s0" in message
    with pytest.raises(el.ConfigError, match="allow_pickle"):
        preview(root, "train", 2)
    problems = lint(root, progress=False)
    assert len(problems) == 4 and all("allow_pickle" in p for p in problems)
    with pytest.raises(el.ConfigError, match="allow_pickle"):
        el.SampleDecoder().decode_part("x.pickle", pickle.dumps(_Payload(target)))
    assert not target.exists()


def test_preview_command_refuses_pickles(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    root = _crude_pickle_dataset(tmp_path / "ds", pickle.dumps(_Payload(target)))
    env = {k: v for k, v in os.environ.items() if k != ALLOW_PICKLE_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "energon_lite.cli", "preview", str(root)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode != 0 and ALLOW_PICKLE_ENV in done.stdout + done.stderr
    assert not target.exists()


def test_pickles_allowed_in_code_or_by_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_PICKLE_ENV, raising=False)
    root = _crude_pickle_dataset(tmp_path / "ds", pickle.dumps({"emb": [1, 2]}))

    class Allowed(_Cook):
        decoder = el.SampleDecoder(allow_pickle=True)

    assert _texts(root, Allowed()) == ["{'emb': [1, 2]}"] * 4
    monkeypatch.setenv(ALLOW_PICKLE_ENV, "1")
    assert _texts(root, _Cook()) == ["{'emb': [1, 2]}"] * 4
    assert "s0" in "\n".join(preview(root, "train", 1))


def test_custom_decoders_and_content_guessing() -> None:
    buf = io.BytesIO()
    make_image(3, (8, 6)).save(buf, format="PNG")
    png = buf.getvalue()
    plain = el.SampleDecoder()
    assert plain.decode_part("img.bin", png) == png  # unknown extension stays bytes
    guessing = el.SampleDecoder(guess_content=True, image_decode="torchuint8")
    assert tuple(guessing.decode_part("img.bin", png).shape) == (3, 6, 8)
    assert guessing.decode("x.dat", png).dtype.is_floating_point is False  # Energon's form
    assert guess_extension(png) == "png" and guess_extension(b"plain text") is None
    npy = io.BytesIO()
    np.save(npy, np.arange(3))
    assert guess_extension(npy.getvalue()) == "npy"
    custom = el.SampleDecoder(decoders={".txt": lambda b: b.decode()[::-1], "seg": len})
    out = custom({"__key__": "k", "a.txt": b"abc", "b.seg": b"12345", "c.json": b"[1]"})
    assert out == {"__key__": "k", "a.txt": "cba", "b.seg": 5, "c.json": [1]}
    with pytest.raises(el.ConfigError, match="not callable"):
        el.SampleDecoder(decoders={"x": 3})  # type: ignore[dict-item]
    assert plain.config() == {
        "image_decode": "torchrgb", "av_decode": "AVDecoder",
        "video_decode_audio": False, "guess_content": False,
    }  # fmt: skip


def _text_dataset(root: Path, config: dict[str, Any], files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _tar(root / "data-0.tar", {f"s{i}": {"txt": b"text %d" % i} for i in range(3)})
    el.prepare_dataset(
        root, split_ratio=[("train", 1)], sample_type="TextSample",
        field_map={"text": "txt"}, progress=False,
    )  # fmt: skip
    for name, text in (files or {}).items():
        (root / ".nv-meta" / name).write_text(text)
    (root / ".nv-meta" / "dataset.yaml").write_text(yaml.safe_dump(config))
    return root


def _open(root: Path) -> Any:
    return el.get_train_dataset(
        root,
        worker_config=el.WorkerConfig(0, 1, 0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        repeat=False,
    )


def test_dataset_yaml_cannot_name_arbitrary_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "imported"
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "evil_mod_xyz.py").write_text(
        f"open({str(target)!r}, 'w').close()\nclass Evil:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(mod_dir))
    root = _text_dataset(
        tmp_path / "ds_ours",
        {"sample_type": {"__module__": "energon_lite.loader.api", "__class__": "SavableLoader"},
         "field_map": {"text": "txt"}},
    )  # fmt: skip
    with pytest.raises(el.DatasetFormatError, match="not a sample type"):
        _open(root)
    for module, cls in (("os", "system"), ("evil_mod_xyz", "Evil"), ("subprocess", "Popen")):
        root = _text_dataset(
            tmp_path / f"ds_{module}",
            {"sample_type": {"__module__": module, "__class__": cls}, "field_map": {"text": "txt"}},
        )
        with pytest.raises(el.DatasetFormatError, match="refused") as info:
            _open(root)
        assert "allowed_modules" in str(info.value) and "dataset.yaml" in str(info.value)
    assert not target.exists() and "evil_mod_xyz" not in sys.modules


def test_classes_of_the_datasets_own_sample_loader(tmp_path: Path) -> None:
    loader = (
        "from dataclasses import dataclass\nfrom os import system\nimport energon_lite as el\n\n"
        "@dataclass\nclass Shout(el.TextSample):\n    loud: bool = True\n\n"
        "def load(parts):\n    return {'text': parts['txt'].upper()}\n"
    )
    config = {
        "sample_type": {"__module__": "sample_loader", "__class__": "Shout"},
        "sample_loader": "sample_loader.py:load",
    }
    root = _text_dataset(tmp_path / "own", config, {"sample_loader.py": loader})
    samples = list(el.get_loader(_open(root)))
    assert sorted(s.text for s in samples) == ["TEXT 0", "TEXT 1", "TEXT 2"]
    assert type(samples[0]).__name__ == "Shout" and samples[0].loud
    config["sample_type"]["__class__"] = "system"  # imported into the file, not defined there
    (root / ".nv-meta" / "dataset.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(el.DatasetFormatError, match="not a class defined"):
        _open(root)


def test_allowed_modules_are_trusted_explicitly(tmp_path: Path) -> None:
    from energon_lite.samples.factory import SampleFactory

    meta = tmp_path / ".nv-meta"
    config = {
        "sample_type": {"__module__": "collections", "__class__": "OrderedDict"},
        "field_map": {"text": "txt"},
    }
    with pytest.raises(el.DatasetFormatError, match="refused"):
        SampleFactory(config, meta)
    assert SampleFactory(config, meta, allowed_modules=["collections"]).sample_type.__name__ == (
        "OrderedDict"
    )


def test_dataset_files_stay_inside_the_dataset(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').close()\ndef load(p):\n    return {{}}\n"
    )
    for spec in ("../../outside.py:load", f"{outside}:load"):
        root = _text_dataset(
            tmp_path / f"ds{len(spec)}",
            {"sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
             "sample_loader": spec},
        )  # fmt: skip
        with pytest.raises(el.DatasetFormatError, match="outside the dataset folder"):
            _open(root)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("legacy", "sample_type", "field_map"),
    [
        ("CaptioningWebdataset", "CaptioningSample", {"image": "jpg", "caption": "txt"}),
        ("TextWebdataset", "TextSample", {"text": "txt"}),
        ("ImageWebdataset", "ImageSample", {"image": "jpg"}),
    ],
)
def test_legacy_webdataset_class_loads_with_a_warning(
    tmp_path: Path, legacy: str, sample_type: str, field_map: dict[str, str]
) -> None:
    root = tmp_path / "legacy"
    write_captioning_shards(root, 20, 10, image_size=(8, 8))
    el.prepare_dataset(
        root, split_ratio=[("train", 1)], sample_type="TextSample",
        field_map={"text": "txt"}, progress=False,
    )  # fmt: skip
    config = {"__module__": "megatron.energon", "__class__": legacy, "field_map": field_map,
              "subflavors": {"origin": "legacy"}}  # fmt: skip
    (root / ".nv-meta" / "dataset.yaml").write_text(yaml.safe_dump(config))
    with pytest.warns(DeprecationWarning) as record:
        ds = _open(root)
    message = "\n".join(str(w.message) for w in record)
    assert f"__class__: {sample_type}" in message and "remove the top-level" in message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        samples = list(el.get_loader(ds))
    assert len(samples) == 20 and type(samples[0]).__name__ == sample_type
    assert samples[0].__subflavors__ == {"origin": "legacy"}


def test_a_top_level_class_next_to_a_valid_sample_type_is_refused(tmp_path: Path) -> None:
    valid = {"sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
             "field_map": {"text": "txt"}}  # fmt: skip
    assert len(list(_open(_text_dataset(tmp_path / "plain", valid)))) == 3
    for top in (
        {"__module__": "os", "__class__": "system"},
        {"__module__": "os"},
        {"__class__": "Popen"},
        {"__module__": "megatron.energon", "__class__": "SavableLoader"},
    ):
        root = _text_dataset(tmp_path / f"ds_{len(str(top))}_{sorted(top)[0]}", {**top, **valid})
        with pytest.raises(el.DatasetFormatError, match="top-level __module__") as info:
            _open(root)
        message = str(info.value)
        assert str(root / ".nv-meta" / "dataset.yaml") in message and "refused" in message
        assert repr(top.get("__class__")) in message and "use sample_type" in message


_LOAD_AND_MEASURE = """
import resource, sys
import energon_lite as el

ds = el.get_train_dataset(
    sys.argv[1], worker_config=el.WorkerConfig(0, 1, 0), batch_size=None,
    shuffle_buffer_size=None, max_samples_per_sequence=None, repeat=False,
)
keys = [s.__key__ for s in el.get_loader(ds)]
print(",".join(keys))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)  # peak MiB
"""


# the image is a decompression bomb on purpose: Pillow's warning comes with our refusal
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_an_image_over_the_pixel_budget_is_skipped_from_its_header(tmp_path: Path) -> None:
    from PIL import Image

    huge = io.BytesIO()
    Image.new("1", (13000, 13000)).save(huge, "PNG")  # 169 M pixels in 20 KB
    assert len(huge.getvalue()) < 100_000
    small = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 10, 10)).save(small, "PNG")
    root = tmp_path / "ds"
    root.mkdir()
    _tar(root / "data-0.tar", {
        "a": {"png": small.getvalue()}, "bomb": {"png": huge.getvalue()},
        "c": {"png": small.getvalue()},
    })  # fmt: skip
    el.prepare_dataset(
        root, split_ratio=[("train", 1)], sample_type="ImageSample",
        field_map={"image": "png"}, progress=False,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_MEASURE, str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    keys, peak_mib = done.stdout.split()
    assert keys == "a,c"  # the bomb is skipped, the others delivered
    # decoded to float RGB it would take 2 GB; skipped from the header, the process stays
    # near its size after importing torch
    assert int(peak_mib) < 1200, peak_mib
    assert "'bomb'" in done.stderr and "png: PNG image of 13000x13000 = 169,000,000 pixels" in (
        done.stderr
    )
    assert "per-image budget of 67,108,864 (SampleDecoder(max_image_pixels=...))" in done.stderr

    data = huge.getvalue()  # settable: None keeps Pillow's own limit, a smaller one applies
    wide = el.SampleDecoder(max_image_pixels=13000 * 13000, image_decode="pil")
    assert wide.decode_part("x.png", data).size == (13000, 13000)
    strict = el.SampleDecoder(max_image_pixels=32 * 24 - 1)
    with pytest.raises(el.MediaDecodeError, match=r"x.png: PNG image of 32x24 = 768 pixels"):
        strict.decode_part("x.png", small.getvalue())
    with pytest.raises(el.ConfigError, match="max_image_pixels=0"):
        el.SampleDecoder(max_image_pixels=0)

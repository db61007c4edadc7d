"""Interactive prepare on a real pseudo-terminal (issue 26 items 3 and 7): each answer is
checked as it is given and asked again after a mistake; each field's question lists the
parts seen in the shards; a required field cannot be skipped."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import yaml

from energon_lite.synth.shards import write_captioning_shards


def _on_terminal(args: list[str], answers: list[str]) -> tuple[int, str, list[str]]:
    """Run the CLI on a pseudo-terminal; type the next answer at each question (a line
    ending with ':'). Returns the exit status, everything shown, and the answers not used."""
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "energon_lite.cli", *args],
        stdin=child_fd, stdout=child_fd, stderr=child_fd,
    )  # fmt: skip
    os.close(child_fd)
    pending = list(answers)
    output = b""
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:  # the process ended and closed the terminal
            break
        if not chunk:
            break
        output += chunk
        if output.rstrip().endswith(b":") and pending:
            os.write(main_fd, (pending.pop(0) + "\n").encode())
            output += b"\n"  # so that the same question is not answered twice
    proc.wait(timeout=120)
    os.close(main_fd)
    return proc.returncode, output.decode(errors="replace").replace("\r\n", "\n"), pending


def test_mistakes_are_asked_again_and_parts_are_listed(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 30, 10, image_size=(8, 8), with_json=True)  # 3 shards
    answers = [
        "8,1,1",  # leaves val without a shard: asked again
        "2,1",
        "CaptionSample",  # no such type: asked again
        "CaptioningSample",
        "",  # image is required: asked again
        "jgp",  # no such part: asked again
        "jpg",
        "json[captoin]",  # no such key in the first sample: asked again
        "json[caption]",
    ]
    code, shown, unused = _on_terminal(["prepare", str(tmp_path)], answers)
    assert code == 0, shown
    assert unused == []
    assert "leaves split 'val' empty" in shown and "try again" in shown
    assert "'CaptionSample' is not one of the sample types above" in shown
    assert "Parts seen in the 3 shards: jpg, json, txt" in shown
    assert "Part for field 'image' (required; parts: jpg, json, txt" in shown
    assert "'image' is required" in shown
    assert "no sample of the 3 shards has part 'jgp'" in shown
    assert "the part has no key 'captoin'" in shown
    assert "empty to skip" not in shown and "--field-map" not in shown
    assert "Prepared 30 samples in 3 shards" in shown
    config = yaml.safe_load((tmp_path / ".nv-meta/dataset.yaml").read_text())
    assert config["field_map"] == {"image": "jpg", "caption": "json[caption]"}
    split = yaml.safe_load((tmp_path / ".nv-meta/split.yaml").read_text())
    assert [len(split["split_parts"][s]) for s in ("train", "val")] == [2, 1]


def test_optional_fields_can_be_skipped(tmp_path: Path) -> None:
    write_captioning_shards(tmp_path, 20, 10, image_size=(8, 8), with_json=True)
    answers = ["1", "ImageClassificationSample", "jpg", "json[index]", ""]
    code, shown, unused = _on_terminal(["prepare", str(tmp_path)], answers)
    assert code == 0 and unused == [], shown
    assert "Part for field 'label' (optional, empty to skip; parts: jpg, json, txt" in shown
    config = yaml.safe_load((tmp_path / ".nv-meta/dataset.yaml").read_text())
    assert config["field_map"] == {"image": "jpg", "label": "json[index]"}


def test_a_part_only_in_shards_not_scanned_is_taken_when_given_again(tmp_path: Path) -> None:
    import io
    import tarfile

    write_captioning_shards(tmp_path, 60, 10, image_size=(8, 8))  # 6 shards; 4 are scanned
    shard = tmp_path / "parts/data-1.tar"  # not among the first, last and two between
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(shard, "w") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data))
            if member.name.endswith(".txt"):  # a sample's last part: add a label after it
                extra = tarfile.TarInfo(member.name[: -len("txt")] + "cls")
                extra.size = 1
                tar.addfile(extra, io.BytesIO(b"3"))
    answers = ["1", "ImageClassificationSample", "jpg", "cls", "cls", ""]
    code, shown, unused = _on_terminal(["prepare", str(tmp_path)], answers)
    assert code == 0 and unused == [], shown
    assert "Parts seen in 4 of the 6 shards: jpg, txt" in shown
    assert "give the same answer again to use it anyway" in shown
    config = yaml.safe_load((tmp_path / ".nv-meta/dataset.yaml").read_text())
    assert config["field_map"] == {"image": "jpg", "label": "cls"}

"""What pip installs from pyproject.toml: the ``s3-test`` extra keeps the S3 stack whole, and
the package ships its ``py.typed`` marker."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; 3.10 reads the same file

ROOT = Path(__file__).resolve().parent.parent


def _extras() -> dict[str, list[Requirement]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    return {name: [Requirement(r) for r in reqs] for name, reqs in extras.items()}


def _upper(spec: Requirement) -> Version:
    (bound,) = [Version(s.version) for s in spec.specifier if s.operator in ("<", "<=")]
    return bound


def test_the_s3_test_extra_bounds_boto3_within_aiobotocores_botocore() -> None:
    """boto3 X.Y.Z needs botocore >= X.Y.Z, so an unbounded boto3 (what a bare ``pip install
    'moto[server]'`` pulls in) drags botocore past aiobotocore's bound."""
    extras = _extras()
    test = {r.name: r for r in extras["s3-test"]}
    assert "server" in test["moto"].extras and test["moto"].specifier  # pinned, with its server
    assert test["energon-lite"].extras == {"s3"}  # the same S3 stack as [s3]
    (aiobotocore,) = [r for r in extras["s3"] if r.name == "aiobotocore"]
    installed = importlib.metadata.version("aiobotocore")
    assert aiobotocore.specifier.contains(installed)
    (botocore,) = [
        Requirement(r)
        for r in importlib.metadata.requires("aiobotocore") or []
        if Requirement(r).name == "botocore" and Requirement(r).marker is None
    ]
    boto3 = test["boto3"].specifier
    lowest = min(s.version for s in boto3 if s.operator in (">", ">="))
    assert botocore.specifier.contains(lowest), (boto3, botocore)
    # every boto3 the extra allows is below aiobotocore's botocore bound
    assert _upper(test["boto3"]) <= _upper(botocore), (boto3, botocore)


def test_the_package_ships_py_typed() -> None:
    assert (ROOT / "energon_lite" / "py.typed").is_file()
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["energon_lite"]

"""Fixtures of the remote tests that read through a counting proxy: a moto S3 server for the
module, a ``FaultProxy`` in front of it that logs every request, and each test's
environment pointing at the proxy with its own cache folder. A test module takes them with
``from s3_fixtures import env, proxy, s3``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from energon_lite.storage import reset_session
from energon_lite.synth.servers import TEST_CREDENTIALS, FaultProxy, S3Server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def proxy(s3: S3Server) -> Iterator[FaultProxy]:
    with FaultProxy(s3.endpoint) as counting:
        yield counting


def point_aws_at(endpoint: str, monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """This test's S3 environment: ``endpoint`` with the test credentials, and ``cache`` as
    its index (and shard) cache folder."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", TEST_CREDENTIALS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", TEST_CREDENTIALS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ENERGON_LITE_CACHE_DIR", str(cache))


@pytest.fixture(autouse=True)
def env(proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    point_aws_at(proxy.endpoint, monkeypatch, tmp_path / "cache")
    yield
    reset_session()  # nothing read or chosen carries into the next test

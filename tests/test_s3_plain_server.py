"""Uploads to an S3-compatible server that does not answer ``Expect: 100-continue`` (a
plain HTTP/1.1 server, as simple S3 emulators and some gateways are): the upload goes through
at once instead of waiting for an interim answer until the read timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import installed_or_skip

from energon_lite.storage import as_path, ops

installed_or_skip("s3fs")


class _Objects(BaseHTTPRequestHandler):
    """PUT stores, GET/HEAD read back; no 100-continue (``BaseHTTPRequestHandler`` sends
    one only when ``handle_expect_100`` is called, which this server never does)."""

    protocol_version = "HTTP/1.1"
    store: dict[str, bytes] = {}

    def handle_expect_100(self) -> bool:
        return True  # accept the request without the interim "100 Continue" line

    def _reply(self, code: int, body: bytes = b"", head: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"0"')
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.store[self.path.split("?")[0]] = self.rfile.read(length)
        self._reply(200)

    def do_GET(self) -> None:
        data = self.store.get(self.path.split("?")[0])
        self._reply(404) if data is None else self._reply(200, data)

    def do_HEAD(self) -> None:
        data = self.store.get(self.path.split("?")[0])
        self._reply(404, head=True) if data is None else self._reply(200, data, head=True)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Objects)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(30)
def test_an_upload_does_not_wait_for_100_continue(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENERGON_LITE_REMOTE_ATTEMPTS", "1")
    options = {"endpoint_url": endpoint, "key": "k", "secret": "s", "timeout": 5}
    path = as_path("s3://bucket/dir/object.bin", options)
    ops.write_atomic(path, b"payload")  # waited 5 s for "100 Continue", then failed
    assert _Objects.store["/bucket/dir/object.bin"] == b"payload"

"""Real servers on 127.0.0.1 for tests and benchmarks of remote datasets.

* ``S3Server``: moto's S3-protocol server (``ThreadedMotoServer``) on a free port, with
  ``upload`` to copy a local folder into a bucket with boto3 (test credentials only).
* ``FaultProxy``: an HTTP proxy in front of a server that, per request, adds a delay, drops
  the connection without an answer, or answers ``503 SlowDown``, on a schedule; it counts
  what it did. Every connection has a socket timeout, so nothing waits forever.
* ``RangeHTTPServer``: serves a folder read-only over HTTP with ``Range`` and ``HEAD``.
* ``write_msc_config``: an MSC config file whose profile points at such a server.

All three are context managers and stop their threads on exit.
"""

from __future__ import annotations

import http.client
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TEST_CREDENTIALS = {"key": "testing-key-id", "secret": "testing-secret-value"}
_TIMEOUT = 10.0  # seconds: upstream requests, thread joins
_CLIENT_TIMEOUT = 120.0  # a client may stream a body slowly (a busy worker): bounded, not short


def write_msc_config(
    path: str | os.PathLike[str],
    profile: str,
    endpoint: str,
    base_path: str,
    credentials: dict[str, str] | None = TEST_CREDENTIALS,
) -> Path:
    """An MSC config file at ``path`` with one S3 profile ``profile`` (``msc://profile/...``)
    over ``endpoint``/``base_path``, with ``credentials`` (``key``, ``secret``) or, for
    ``None``, none of its own (the standard AWS variables then apply)."""
    text = (
        f"profiles:\n  {profile}:\n    storage_provider:\n      type: s3\n      options:\n"
        f"        base_path: {base_path}\n        endpoint_url: {endpoint}\n"
        "        region_name: us-east-1\n"
    )
    if credentials is not None:
        text += (
            "    credentials_provider:\n      type: S3Credentials\n      options:\n"
            f"        access_key: {credentials['key']}\n"
            f"        secret_key: {credentials['secret']}\n"
        )
    Path(path).write_text(text)
    return Path(path)


class S3Server:
    """moto's S3 server on 127.0.0.1 (random free port)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def __enter__(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def client(self, endpoint: str | None = None) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=TEST_CREDENTIALS["key"],
            aws_secret_access_key=TEST_CREDENTIALS["secret"],
            region_name="us-east-1",
        )

    def upload(self, folder: str | os.PathLike[str], bucket: str, prefix: str) -> int:
        """Copy every file under ``folder`` to ``s3://bucket/prefix/``; return the count."""
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if bucket not in existing:
            client.create_bucket(Bucket=bucket)
        root, count = Path(folder), 0
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}".lstrip("/")
                client.upload_file(str(path), bucket, key)
                count += 1
        return count


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # clients open many connections at once (s3transfer: 10 threads)


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = _CLIENT_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # the test output stays clean
        pass


class FaultProxy:
    """Forwards HTTP requests to ``upstream``; ``schedule(n, path)`` -> the n-th request's action.

    Actions: ``None`` (forward), ``"delay:<seconds>"`` (wait, then forward), ``"drop"``
    (close the connection without answering), ``"503"`` (answer S3's SlowDown error).
    ``delay`` is added before every request in any case. ``log`` lists the forwarded
    requests as ``(method, path, status, bytes of the answer's body)``, the first
    ``LOG_LIMIT`` of them (counting GETs and bytes per object).
    """

    LOG_LIMIT = 200_000

    def __init__(
        self,
        upstream: str,
        schedule: Callable[[int, str], str | None] = lambda n, path: None,
        delay: float = 0.0,
    ) -> None:
        self.upstream = upstream.removeprefix("http://").rstrip("/")
        self.schedule = schedule
        self.delay = delay
        self.counts: dict[str, int] = {
            "requests": 0,
            "forwarded": 0,
            "drop": 0,
            "503": 0,
            "delay": 0,
        }
        self.log: list[tuple[str, str, int, int]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(_Quiet):
            def _handle(self) -> None:
                with proxy._lock:
                    number = proxy.counts["requests"]
                    proxy.counts["requests"] += 1
                action = proxy.schedule(number, self.path)
                if proxy.delay:
                    time.sleep(proxy.delay)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if action == "drop":
                    proxy._count("drop")
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if action == "503":
                    proxy._count("503")
                    payload = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                               b"<Message>Please reduce your request rate.</Message></Error>")  # fmt: skip
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if action and action.startswith("delay:"):
                    proxy._count("delay")
                    time.sleep(float(action.split(":", 1)[1]))
                proxy._forward(self, body)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _handle

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes | None) -> None:
        self._count("forwarded")
        conn = http.client.HTTPConnection(self.upstream, timeout=_TIMEOUT)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() != "connection"}
            conn.request(handler.command, handler.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
        finally:
            conn.close()
        with self._lock:
            if len(self.log) < self.LOG_LIMIT:
                self.log.append((handler.command, handler.path, response.status, len(payload)))
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                handler.send_header(name, value)
        length = response.getheader("Content-Length") if handler.command == "HEAD" else None
        handler.send_header("Content-Length", length or str(len(payload)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(payload)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=_TIMEOUT)


class RangeHTTPServer:
    """A read-only HTTP server for a folder, with ``Range: bytes=a-b`` and ``HEAD``."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        root = Path(folder).resolve()
        self.requests = 0
        server = self

        class Handler(_Quiet):
            def _file(self) -> Path | None:
                path = (root / self.path.split("?", 1)[0].lstrip("/")).resolve()
                if root not in path.parents or not path.is_file():
                    self.send_error(404)
                    return None
                return path

            def do_HEAD(self) -> None:
                server.requests += 1
                path = self._file()
                if path is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(path.stat().st_size))
                    self.send_header("Accept-Ranges", "bytes")
                    self.send_header("ETag", f'"{path.stat().st_mtime_ns}"')
                    self.end_headers()

            def do_GET(self) -> None:
                server.requests += 1
                path = self._file()
                if path is None:
                    return
                size = path.stat().st_size
                start, end, status = 0, size, 200
                spec = self.headers.get("Range", "")
                if spec.startswith("bytes="):
                    first, _, last = spec[6:].partition("-")
                    start = int(first or 0)
                    end = min(size, int(last) + 1) if last else size
                    status = 206
                with open(path, "rb") as file:
                    file.seek(start)
                    data = file.read(max(0, end - start))
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("ETag", f'"{path.stat().st_mtime_ns}"')
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
                self.end_headers()
                self.wfile.write(data)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RangeHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=_TIMEOUT)

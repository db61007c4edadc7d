"""The loader's metrics for Prometheus: scraped over 127.0.0.1 from a real prometheus-client
server, pushed to a real HTTP server speaking the Pushgateway's PUT, and the Grafana
dashboard of docs/ asks only for series the exporter serves."""

from __future__ import annotations

import json
import re
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client", reason="pip install 'energon-lite[prometheus]'")
from conftest import make_dataset
from prometheus_client.parser import text_string_to_metric_families

from energon_lite import WorkerConfig, get_savable_loader, get_train_dataset
from energon_lite.errors import ConfigError
from energon_lite.loader.prometheus import push_metrics, serve_metrics

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana_loader.json"


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("prom") / "captions", 120, 20)


def _loader(path: Path, workers: int = 2, rank: int = 0):
    dataset = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=rank, world_size=rank + 1, num_workers=workers),
        batch_size=6,
        shuffle_buffer_size=10,
        max_samples_per_sequence=10,
    )
    return get_savable_loader(dataset, stats=True)


def _take(iterator, batches: int) -> None:
    for _ in range(batches):
        next(iterator)


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((sample.labels, sample.value))
    return series


def test_each_scrape_serves_the_window_since_the_last(dataset_path: Path) -> None:
    loader = _loader(dataset_path, rank=1)
    served = serve_metrics(loader, 0, addr="127.0.0.1")
    try:
        batches = iter(loader)
        _take(batches, 5)
        first = _scrape(served.port)
        _take(batches, 3)
        second = _scrape(served.port)
        for_the_logger = loader.metrics()  # its own window: from the start
    finally:
        served.close()
        loader.close()
    assert first["energon_lite_batches"] == [({"rank": "1"}, 5.0)]
    assert first["energon_lite_samples"] == [({"rank": "1"}, 30.0)]
    assert second["energon_lite_batches"] == [({"rank": "1"}, 3.0)]
    assert for_the_logger["loader/batches"] == 8
    shares = {labels["stage"]: value for labels, value in first["energon_lite_stage_time_share"]}
    assert {"reader", "shufflebuffer", "encode", "batch", "other"} == set(shares)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)
    busy = first["energon_lite_worker_busy_fraction"]
    assert sorted(labels["worker"] for labels, _ in busy) == ["0", "1"]
    assert all(labels["rank"] == "1" and 0 < value <= 1 for labels, value in busy)
    assert first["energon_lite_wait_ms_per_batch"][0][1] >= 0


def test_a_port_taken_is_a_clear_error(dataset_path: Path) -> None:
    loader = _loader(dataset_path, workers=0)
    served = serve_metrics(loader, 0, addr="127.0.0.1")
    try:
        with pytest.raises(ConfigError, match=f"127.0.0.1:{served.port}"):
            serve_metrics(loader, served.port, addr="127.0.0.1")
    finally:
        served.close()


class _Gateway(BaseHTTPRequestHandler):
    """The part of the Pushgateway's API a push uses: PUT /metrics/job/<job>/<label>/<value>."""

    pushes: list[tuple[str, str]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.pushes.append((self.path, body.decode()))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_push_to_a_gateway_groups_by_job_and_rank(dataset_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    loader = _loader(dataset_path, workers=0, rank=2)
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        batches = iter(loader)
        _take(batches, 4)
        pushed = push_metrics(loader, url, job="train")
        _take(batches, 2)
        push_metrics(pushed, url, job="train")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        loader.close()
    assert [path for path, _ in _Gateway.pushes] == ["/metrics/job/train/rank/2"] * 2
    counts = [
        [s.value for f in text_string_to_metric_families(body) for s in f.samples
         if s.name == "energon_lite_batches"]
        for _, body in _Gateway.pushes
    ]  # fmt: skip
    assert counts == [[4.0], [2.0]]


def test_the_dashboard_asks_for_served_series_only(dataset_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    asked = {name for q in queries for name in re.findall(r"energon_lite_[a-z_]+", q)}
    loader = _loader(dataset_path)
    served = serve_metrics(loader, 0, addr="127.0.0.1")
    try:
        _take(iter(loader), 4)
        names = set(_scrape(served.port))
    finally:
        served.close()
        loader.close()
    assert len(queries) >= 6 and asked
    blend_only = {"energon_lite_mix_share", "energon_lite_mix_target"}  # this loader has none
    missing = asked - names - blend_only
    assert not missing, f"the dashboard asks for series nobody serves: {sorted(missing)}"
    assert blend_only <= asked and "energon_lite_mix_target" not in names

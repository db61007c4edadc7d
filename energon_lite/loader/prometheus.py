"""The loader's metrics for Prometheus: each rank serves them on a port, or pushes them.

``serve_metrics(loader, port)`` starts prometheus-client's HTTP server (a daemon thread)
with a registry of its own; every scrape reads ``loader.stats()`` and publishes the window
since the previous scrape, the same figures as ``loader.metrics()``
(:mod:`energon_lite.loader.metrics`), as gauges named ``energon_lite_<family>``: the
family's path with its label holes taken out (``loader/stage/encode/time_share`` is
``energon_lite_stage_time_share{stage="encode"}``). Every series carries ``rank``; a
worker's carries ``worker``, a stage's ``stage``, a blend source's ``source``. A second
window of its own keeps ``loader.metrics()`` for your logger untouched.

``push_metrics(loader, url)`` sends the same to a Pushgateway (grouped by job and rank), for
jobs that a Prometheus server cannot reach; call it every few hundred steps.

Needs ``pip install 'energon-lite[prometheus]'`` (prometheus-client).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from energon_lite.errors import ConfigError
from energon_lite.loader.metrics import MetricsWindow, Point

__all__ = ["PrometheusMetrics", "metric_name", "push_metrics", "serve_metrics"]

PREFIX = "energon_lite_"


def metric_name(family: str) -> str:
    """``"stage/{stage}/time_share"`` -> ``"energon_lite_stage_time_share"``."""
    return PREFIX + re.sub(r"/+", "_", re.sub(r"\{[^}]*\}", "", family)).strip("_")


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError as exc:
        raise ConfigError(
            f"Prometheus metrics need prometheus-client: pip install 'energon-lite[prometheus]' ({exc})"
        ) from None
    return prometheus_client


class PrometheusMetrics:
    """A collector over one loader (``registry.register(self)``); ``serve_metrics`` and
    ``push_metrics`` make one. ``rank`` defaults to the loader's."""

    def __init__(self, loader: Any, rank: int | None = None) -> None:
        client = _client()
        self.loader = loader
        self.rank = str(loader.worker_config.rank if rank is None else rank)
        self.window = MetricsWindow()
        self.registry = client.CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server: Any = None
        self._thread: Any = None

    def collect(self) -> Iterator[Any]:
        """prometheus-client's collector protocol: one gauge family per metric family."""
        from prometheus_client.core import GaugeMetricFamily

        families: dict[str, list[Point]] = {}
        for point in self.window.take(self.loader.stats()):
            families.setdefault(point.family, []).append(point)
        for family, points in families.items():
            names = ["rank", *(k for k, _ in points[0].labels)]
            gauge = GaugeMetricFamily(
                metric_name(family), f"energon_lite loader/{family}", labels=names
            )
            for point in points:
                gauge.add_metric([self.rank, *(v for _, v in point.labels)], point.value)
            yield gauge

    @property
    def port(self) -> int:
        """The port the server listens on (``serve_metrics(port=0)`` picks a free one)."""
        if self.server is None:
            raise ConfigError("these metrics are not served; use serve_metrics(loader, port)")
        return int(self.server.server_port)

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self._thread.join(timeout=10)
            self.server = None


def serve_metrics(
    loader: Any, port: int, *, addr: str = "0.0.0.0", rank: int | None = None
) -> PrometheusMetrics:
    """Serve ``loader``'s metrics at ``http://addr:port/metrics`` until ``close()`` (give each
    rank of a node its own port, e.g. ``9400 + local rank``)."""
    metrics = PrometheusMetrics(loader, rank)
    try:
        metrics.server, metrics._thread = _client().start_http_server(
            port, addr=addr, registry=metrics.registry
        )
    except OSError as exc:
        raise ConfigError(f"serve_metrics: cannot listen on {addr}:{port}: {exc}") from exc
    return metrics


def push_metrics(
    loader_or_metrics: Any, url: str, *, job: str = "energon_lite", rank: int | None = None
) -> PrometheusMetrics:
    """Push the window since the last push to the Pushgateway at ``url``, grouped by ``job``
    and ``rank``. Pass the returned object back on the next call, so that windows follow on
    from each other."""
    metrics = (
        loader_or_metrics
        if isinstance(loader_or_metrics, PrometheusMetrics)
        else PrometheusMetrics(loader_or_metrics, rank)
    )
    _client().push_to_gateway(
        url, job=job, registry=metrics.registry, grouping_key={"rank": metrics.rank}
    )
    return metrics

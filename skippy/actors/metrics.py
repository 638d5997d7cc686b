"""Prometheus metrics of one engine (prometheus-client, one registry per engine).

Names follow llama-server's (``llamacpp:...``) where one exists, and
``skippy:...`` otherwise. Counters and gauges of the scheduler and hook
evaluator are read at scrape time by a collector (nothing is counted twice
on the decode path); latency histograms are observed by the request tasks:

- ``llamacpp:prompt_tokens_total``, ``llamacpp:tokens_predicted_total``
- ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``
- ``llamacpp:kv_cache_tokens`` (KV cells holding tokens, resident prefixes included)
- ``skippy:requests_parked`` (sequences waiting for a hook verdict), ``skippy:decode_steps_total``
- ``skippy:prefix_cache_queries_total``, ``skippy:prefix_cache_hits_total``,
  ``skippy:prefix_cache_cached_tokens_total``
- ``skippy:time_to_first_token_seconds``, ``skippy:inter_token_latency_seconds``,
  ``skippy:e2e_request_latency_seconds`` (histograms)
- ``skippy:hook_calls_total``, ``skippy:hook_timeouts_total``, ``skippy:hook_errors_total`` (label ``event``)
- ``skippy:http_responses_total`` (label ``status_class``: ``2xx``, ``4xx``, ``5xx``)
- ``skippy:http_client_disconnects_total``: requests whose client went away before the end of the
  response (logged with status 499); not counted as responses, as llama-server does not count them as errors
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineMetrics:
    """The registry of one engine plus its histograms and token counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ttft = Histogram("skippy:time_to_first_token_seconds", "Time from request admission to first token",
                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.itl = Histogram("skippy:inter_token_latency_seconds", "Time between two tokens of one stream",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.e2e = Histogram("skippy:e2e_request_latency_seconds", "Time from request start to its last token",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.responses = Counter("skippy:http_responses", "HTTP responses by status class", ["status_class"],
                                 registry=self.registry)
        self.disconnects = Counter("skippy:http_client_disconnects",
                                   "Requests whose client disconnected before the response ended",
                                   registry=self.registry)
        self.engine: Any = None

    def attach(self, engine: Any) -> None:
        """Read the live scheduler and hook counters of ``engine`` at scrape time."""
        self.engine = engine
        self.registry.register(_EngineCollector(self))

    def response(self, status: int) -> None:
        """Count one response by status class; 499 (the client went away) is counted as a disconnect."""
        if status == 499:
            self.disconnects.inc()
        else:
            self.responses.labels(f"{status // 100}xx").inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class _EngineCollector:
    def __init__(self, metrics: EngineMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        engine = self.metrics.engine
        sched = engine.scheduler.stats()
        yield GaugeMetricFamily("llamacpp:requests_processing", "Sequences holding a slot", value=sched.n_running)
        yield GaugeMetricFamily("llamacpp:requests_deferred", "Requests waiting for a slot", value=sched.n_waiting)
        yield GaugeMetricFamily("llamacpp:kv_cache_tokens", "KV cells holding tokens", value=sched.kv_cells_used)
        yield GaugeMetricFamily("skippy:requests_parked", "Sequences waiting for a hook verdict", value=sched.n_parked)
        yield CounterMetricFamily("skippy:decode_steps", "llama_decode calls of the decode loop", value=sched.steps)
        # counted by the scheduler as it decodes: requests that time out or lose their client count too
        yield CounterMetricFamily("llamacpp:prompt_tokens", "Prompt tokens prefilled (cached ones excluded)",
                                  value=sched.prompt_tokens_total)
        yield CounterMetricFamily("llamacpp:tokens_predicted", "Tokens generated", value=sched.tokens_predicted_total)
        yield CounterMetricFamily("skippy:prefix_cache_queries", "Prefix-cache lookups at admission",
                                  value=sched.prefix_queries)
        yield CounterMetricFamily("skippy:prefix_cache_hits", "Admissions that reused a cached prefix",
                                  value=sched.prefix_hits)
        yield CounterMetricFamily("skippy:prefix_cache_cached_tokens", "Prompt tokens reused from the cache",
                                  value=sched.cached_tokens_total)
        if engine.hooks is not None:
            stats = engine.hooks.stats.snapshot()
            for key in ("calls", "timeouts", "errors"):
                fam = CounterMetricFamily(f"skippy:hook_{key}", f"Hook policy {key} by event", labels=["event"])
                for event, counts in stats.items():
                    fam.add_metric([event], counts[key])
                yield fam

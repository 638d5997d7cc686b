"""Prometheus metrics of one engine (prometheus-client, one registry per engine).

Names follow llama-server's (``llamacpp:...``, its whole set as of the pinned
llama.cpp's ``server_task_result_metrics::to_metrics``) where one exists, and
``skippy:...`` otherwise. Counters and gauges of the scheduler and hook
evaluator are read at scrape time by a collector (nothing is counted twice
on the decode path); latency histograms and per-response counters are
observed by the request tasks:

- ``llamacpp:prompt_tokens_total`` (prefilled, cached ones excluded),
  ``llamacpp:prompt_tokens_cached_total``, ``llamacpp:prompt_seconds_total``,
  ``llamacpp:tokens_predicted_total``, ``llamacpp:tokens_predicted_seconds_total``
  (seconds summed over finished sequences: admission to first token, first
  token to end), ``llamacpp:n_decode_total`` (``llama_decode`` calls)
- gauges ``llamacpp:n_tokens_max`` (longest sequence seen; llama-server types it
  a counter, but it is a maximum), ``llamacpp:n_busy_slots_per_decode``,
  ``llamacpp:prompt_tokens_seconds`` / ``llamacpp:predicted_tokens_seconds``
  (tokens per second of prompt / generation time of the sequences finished
  since the previous scrape, as llama-server's buckets; 0 when none finished),
  ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
  ``llamacpp:kv_cache_tokens`` (KV cells holding tokens, resident prefixes
  included) and ``llamacpp:kv_cache_usage_ratio`` (of ``n_ctx x parallel`` cells;
  both from older llama-server releases)
- ``skippy:requests_parked`` (sequences waiting for a hook verdict), ``skippy:decode_steps_total``
- ``skippy:prefix_cache_queries_total``, ``skippy:prefix_cache_hits_total``,
  ``skippy:prefix_cache_cached_tokens_total``
- histograms ``skippy:time_to_first_token_seconds``, ``skippy:inter_token_latency_seconds``,
  ``skippy:e2e_request_latency_seconds``, ``skippy:queue_wait_seconds`` (submission to
  admission), ``skippy:prefill_seconds`` (admission to first token)
- ``skippy:hook_calls_total``, ``skippy:hook_timeouts_total``, ``skippy:hook_errors_total`` (label ``event``)
- ``skippy:http_responses_total`` (label ``status_class``: ``2xx``, ``4xx``, ``5xx``),
  ``skippy:http_route_responses_total`` (labels ``method``, ``route``: the route's
  path pattern, ``unmatched`` for unknown paths; ``status``: the code),
  ``skippy:errors_total`` (label ``code``: the error envelope's ``code``, else its ``type``),
  ``skippy:finishes_total`` (label ``finish_reason``)
- ``process_*`` (resident memory, CPU seconds, open file descriptors, start time:
  prometheus-client's ``ProcessCollector``, where ``/proc`` exists)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineMetrics:
    """The registry of one engine plus its histograms and per-response counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ttft = Histogram("skippy:time_to_first_token_seconds", "Time from request admission to first token",
                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.itl = Histogram("skippy:inter_token_latency_seconds", "Time between two tokens of one stream",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.e2e = Histogram("skippy:e2e_request_latency_seconds", "Time from request start to its last token",
                             buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.queue_wait = Histogram("skippy:queue_wait_seconds", "Time a sequence waited for a slot",
                                    buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.prefill = Histogram("skippy:prefill_seconds", "Time from admission to a sequence's first token",
                                 buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.responses = Counter("skippy:http_responses", "HTTP responses by status class", ["status_class"],
                                 registry=self.registry)
        self.route_responses = Counter("skippy:http_route_responses", "HTTP responses by route and status code",
                                       ["method", "route", "status"], registry=self.registry)
        self.errors = Counter("skippy:errors", "Error responses (and late SSE error events) by error code",
                              ["code"], registry=self.registry)
        self.finishes = Counter("skippy:finishes", "Generations finished, by finish_reason", ["finish_reason"],
                                registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.engine: Any = None
        self._last: Any = None  # the scheduler snapshot of the previous scrape (throughput gauges)

    def attach(self, engine: Any) -> None:
        """Read the live scheduler and hook counters of ``engine`` at scrape time."""
        self.engine = engine
        self.registry.register(_EngineCollector(self))

    def response(self, status: int) -> None:
        self.responses.labels(f"{status // 100}xx").inc()

    def route_response(self, method: str, route: str, status: int, error_code: str | None = None) -> None:
        """Count one response of ``method`` ``route`` (the path pattern) with ``status``, and its error code."""
        self.route_responses.labels(method, route, str(status)).inc()
        if error_code is not None:
            self.errors.labels(error_code).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


def _rate(tokens: float, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


class _EngineCollector:
    def __init__(self, metrics: EngineMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        engine = self.metrics.engine
        sched = engine.scheduler.stats()
        last, self.metrics._last = self.metrics._last, sched
        yield GaugeMetricFamily("llamacpp:requests_processing", "Sequences holding a slot", value=sched.n_running)
        yield GaugeMetricFamily("llamacpp:requests_deferred", "Requests waiting for a slot", value=sched.n_waiting)
        yield GaugeMetricFamily("llamacpp:kv_cache_tokens", "KV cells holding tokens", value=sched.kv_cells_used)
        cells = engine.meta.n_ctx_seq * engine.meta.n_seq_max
        yield GaugeMetricFamily("llamacpp:kv_cache_usage_ratio", "KV cells holding tokens, of all cells",
                                value=sched.kv_cells_used / cells if cells else 0.0)
        yield GaugeMetricFamily("skippy:requests_parked", "Sequences waiting for a hook verdict", value=sched.n_parked)
        yield CounterMetricFamily("skippy:decode_steps", "llama_decode calls of the decode loop", value=sched.steps)
        # counted by the scheduler as it decodes: requests that time out or lose their client count too
        yield CounterMetricFamily("llamacpp:prompt_tokens", "Prompt tokens prefilled (cached ones excluded)",
                                  value=sched.prompt_tokens_total)
        yield CounterMetricFamily("llamacpp:prompt_tokens_cached", "Prompt tokens reused from the cache",
                                  value=sched.cached_tokens_total)
        yield CounterMetricFamily("llamacpp:prompt_seconds", "Time spent on prompts (admission to first token)",
                                  value=sched.prompt_seconds_total)
        yield CounterMetricFamily("llamacpp:tokens_predicted", "Tokens generated", value=sched.tokens_predicted_total)
        yield CounterMetricFamily("llamacpp:tokens_predicted_seconds", "Time spent generating (first token to end)",
                                  value=sched.predicted_seconds_total)
        yield CounterMetricFamily("llamacpp:n_decode", "llama_decode() calls", value=sched.steps)
        yield GaugeMetricFamily("llamacpp:n_tokens_max", "Longest sequence seen (prompt + generation)",
                                value=sched.n_tokens_max)
        yield GaugeMetricFamily("llamacpp:n_busy_slots_per_decode", "Average sequences per llama_decode() call",
                                value=sched.busy_slots_total / max(sched.steps, 1))
        d_prompt = sched.timed_prompt_tokens - (last.timed_prompt_tokens if last else 0)
        d_prompt_s = sched.prompt_seconds_total - (last.prompt_seconds_total if last else 0.0)
        d_pred = sched.timed_predicted_tokens - (last.timed_predicted_tokens if last else 0)
        d_pred_s = sched.predicted_seconds_total - (last.predicted_seconds_total if last else 0.0)
        yield GaugeMetricFamily("llamacpp:prompt_tokens_seconds", "Prompt throughput since the last scrape, tokens/s",
                                value=_rate(d_prompt, d_prompt_s))
        yield GaugeMetricFamily("llamacpp:predicted_tokens_seconds",
                                "Generation throughput since the last scrape, tokens/s", value=_rate(d_pred, d_pred_s))
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

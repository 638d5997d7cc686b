"""Prometheus metrics of one engine (prometheus-client, one registry per engine).

A server of several models renders :class:`PoolMetrics` instead: each loaded model's series
below with a ``model`` label, ``skippy:model_loaded{model}`` and ``skippy:model_loading{model}``, and the HTTP
counters and ``process_*`` once for the server.

Names follow llama-server's (``llamacpp:...``, its whole set as of the pinned
llama.cpp's ``server_task_result_metrics::to_metrics``) where one exists, and
``skippy:...`` otherwise. Counters and gauges of the scheduler and hook
evaluator are read at scrape time by a collector (nothing is counted twice
on the decode path); latency histograms and per-response counters are
observed by the request tasks:

- ``llamacpp:prompt_tokens_total`` (prefilled, cached ones excluded),
  ``llamacpp:prompt_tokens_cached_total``, ``llamacpp:prompt_seconds_total``,
  ``llamacpp:tokens_predicted_total`` (the replies' completion tokens, as llama-server's: counted by the
  request tasks as their generations accept them, so tokens decoded after a stop string matched are not,
  and a reply cut short by its client counts the tokens it had), ``llamacpp:tokens_predicted_seconds_total``
  (seconds summed over finished sequences: admission to first token, first
  token to end), ``llamacpp:n_decode_total`` (``llama_decode`` calls)
- gauges ``llamacpp:n_tokens_max`` (longest sequence seen; llama-server types it
  a counter, but it is a maximum), ``llamacpp:n_busy_slots_per_decode``,
  ``llamacpp:prompt_tokens_seconds`` / ``llamacpp:predicted_tokens_seconds``
  (tokens per second of prompt / generation time of the sequences finished
  since the previous scrape, as llama-server's buckets; 0 when none finished; generated tokens as the
  replies count them),
  ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
  ``llamacpp:kv_cache_tokens`` (KV cells holding tokens, resident prefixes
  included) and ``llamacpp:kv_cache_usage_ratio`` (of ``n_ctx x parallel`` cells;
  both from older llama-server releases)
- ``skippy:requests_parked`` (sequences waiting for a hook verdict), ``skippy:decode_steps_total``
- ``skippy:prefix_cache_queries_total``, ``skippy:prefix_cache_hits_total``,
  ``skippy:prefix_cache_cached_tokens_total``
- context checkpoints (recurrent, hybrid and sliding-window models; on other models the prompt cache's
  saved prompts, ``--cache-ram``): gauges ``skippy:ctx_checkpoints``
  and ``skippy:ctx_checkpoint_bytes`` (host memory held), counters ``skippy:ctx_checkpoints_saved_total``,
  ``skippy:ctx_checkpoints_restored_total``, ``skippy:ctx_checkpoints_evicted_total``
- histograms ``skippy:time_to_first_token_seconds``, ``skippy:inter_token_latency_seconds``,
  ``skippy:e2e_request_latency_seconds``, ``skippy:queue_wait_seconds`` (submission to
  admission), ``skippy:prefill_seconds`` (admission to first token)
- ``skippy:hook_calls_total``, ``skippy:hook_timeouts_total``, ``skippy:hook_errors_total`` (label ``event``)
- ``skippy:consultations_total`` (labels ``peer``: as ``--consult`` names it; ``outcome``: ``answered``,
  ``empty``, ``error``, ``timeout``, ``cancelled``: the slower of two peers asked at once) and the histogram
  ``skippy:consultation_seconds`` (label ``peer``; cancelled requests not observed), observed by
  :class:`~skippy.actors.consult.ConsultPolicy`
- ``skippy:http_responses_total`` (label ``status_class``: ``2xx``, ``4xx``, ``5xx``),
  ``skippy:http_route_responses_total`` (labels ``method``: HTTP's standard ones, ``other`` for any other;
  ``route``: the route's path pattern, ``unmatched`` for unknown paths; ``status``: the code),
  ``skippy:errors_total`` (label ``code``: the error envelope's ``code``, else its ``type``),
  ``skippy:finishes_total`` (label ``finish_reason``), ``skippy:responses_store_errors_total`` (label ``op``:
  ``get``, ``put``, ``delete``; the store of ``/v1/responses`` failed and the request went on without it)
- ``process_*`` (resident memory, CPU seconds, open file descriptors, start time:
  prometheus-client's ``ProcessCollector``, where ``/proc`` exists)
- ``skippy:kv_cache_bytes`` (the KV cache's size, allocated at start-up), ``skippy:kv_cache_used_bytes``
  (``kv_cache_tokens`` x bytes per cell; with a unified KV cache a copied prefix shares its
  cells, so this counts it once per sequence: an upper bound there)
- ``skippy:spec_draft_tokens_total``, ``skippy:spec_accepted_tokens_total`` (speculative decoding;
  vLLM's ``spec_decode_num_draft_tokens`` / ``spec_decode_num_accepted_tokens``): the draft tokens verified
  (counted by the scheduler) and, of them, the accepted ones in the replies (counted by the request tasks:
  those after a stop string are not), so they sum the replies' ``draft_n`` and ``draft_n_accepted``
- decode-loop step times (histograms, observed by the DecodeScheduler, see :class:`StepTimes`):
  ``skippy:decode_seconds`` (one ``llama_decode``), ``skippy:step_overhead_seconds`` (end of one
  ``llama_decode`` to the start of the next while sequences run), and two parts of that overhead:
  ``skippy:step_sample_seconds`` (sampling on the decode thread) and
  ``skippy:step_reader_wait_seconds`` (the cadence wait that lets request tasks write their
  tokens before the next decode: waiting, not the loop's own work) and
  ``skippy:step_handoff_seconds`` (the step crossing between the trio thread and the decode thread,
  both ways: the time the receiving thread waited for the GIL or a core); ``skippy:embedding_batch_seconds``
  (one batch on the embedding context, after a step's decode; not counted as step overhead)
- embeddings (``/v1/embeddings``): ``skippy:embedding_inputs_total``, ``skippy:embedding_tokens_total``
  (inputs and their tokens embedded), ``skippy:embedding_batches_total``, gauge
  ``skippy:embedding_requests_waiting`` (requests not answered yet)
- ``skippy:http_responses_total`` (label ``status_class``: ``2xx``, ``4xx``, ``5xx``)
- ``skippy:http_client_disconnects_total``: requests whose client went away before the end of the
  response (logged with status 499); not counted as responses, as llama-server does not count them as errors
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

#: the ``method`` label's values (RFC 9110's methods and PATCH); any other is ``other``
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Step-time buckets (seconds): 50 us .. 2.5 s, fine below 10 ms where the loop's overhead lives.
STEP_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005,
                0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)


class StepTimes:
    """Histograms of the decode loop's step times (prometheus-client; registered by
    :meth:`EngineMetrics.attach`). :meth:`step` is called once per decode step, from the
    scheduler's task: a few microseconds."""

    def __init__(self) -> None:
        self.decode = Histogram("skippy:decode_seconds", "Time of one llama_decode call",
                                buckets=STEP_BUCKETS, registry=None)
        self.overhead = Histogram("skippy:step_overhead_seconds",
                                  "End of one llama_decode to the start of the next, while sequences run "
                                  "(sampling, events, scheduling, the reader wait)",
                                  buckets=STEP_BUCKETS, registry=None)
        self.sample = Histogram("skippy:step_sample_seconds", "Sampling of one step on the decode thread",
                                buckets=STEP_BUCKETS, registry=None)
        self.reader_wait = Histogram("skippy:step_reader_wait_seconds",
                                     "Part of the step overhead spent waiting for request tasks to write the "
                                     "last tokens (bounded by the scheduler's IDLE_WAIT)", buckets=STEP_BUCKETS,
                                     registry=None)
        self.handoff = Histogram("skippy:step_handoff_seconds",
                                 "Part of the step overhead spent crossing threads: the loop handing the step to "
                                 "the decode thread until its llama_decode starts, plus the end of the last "
                                 "step's sampling until the loop resumed (waits for the GIL or a core)",
                                 buckets=STEP_BUCKETS, registry=None)
        self._back: float | None = None  # the last step's sampling end -> loop resumed, seconds
        self.embed = Histogram("skippy:embedding_batch_seconds",
                               "Time of one batch on the embedding context (run after a step's decode)",
                               buckets=STEP_BUCKETS, registry=None)

    def all(self) -> tuple[Histogram, ...]:
        return self.decode, self.overhead, self.sample, self.reader_wait, self.handoff, self.embed

    def step(self, marks: list[float], last_end: float | None, waited: float, *, decoded: bool = True,
             embedded: bool = False, submitted: float | None = None, resumed: float | None = None) -> float | None:
        """Record one step; returns what ``last_end`` is for the next one.

        ``marks`` from ``perf_counter``: (decode start, decode end, sampling end) when the step
        ``decoded`` (again for each later decode of a multi-step run, whose gaps count as overhead),
        then (embedding batch start, end) when it ``embedded``; ``last_end`` the previous
        decode's end (``None`` when the loop waited for an input in between: idle time is no overhead);
        ``waited`` the reader wait before it; ``submitted`` and ``resumed`` (``perf_counter``) when the
        loop handed the step to the decode thread and when it had the result back, for the handoff
        part. The time of an embedding batch is added to the returned decode end, so it is not
        counted as loop overhead; a step without a decode returns ``None``.
        """
        end = None
        back, self._back = self._back, None
        if decoded:
            t0, t1, t2 = marks[:3]
            self.decode.observe(t1 - t0)
            self.sample.observe(t2 - t1)
            if last_end is not None:
                self.overhead.observe(t0 - last_end)
                self.reader_wait.observe(waited)
                if submitted is not None and back is not None:
                    self.handoff.observe(t0 - submitted + back)
            end = t1
            for i in range(3, len(marks) - 2 * embedded - 2, 3):  # the later decodes of a multi-step run
                u0, u1, u2 = marks[i:i + 3]
                self.overhead.observe(u0 - end)
                self.decode.observe(u1 - u0)
                self.sample.observe(u2 - u1)
                end = u1
            if resumed is not None:
                self._back = resumed - marks[-1]
        if embedded:
            e0, e1 = marks[-2:]
            self.embed.observe(e1 - e0)
            if end is not None:
                end += e1 - e0
        return end


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
        self.http = HttpMetrics(self.registry)
        self.responses, self.route_responses, self.errors = (self.http.responses, self.http.route_responses,
                                                             self.http.errors)
        self.finishes = Counter("skippy:finishes", "Generations finished, by finish_reason", ["finish_reason"],
                                registry=self.registry)
        self.consultations = Counter("skippy:consultations", "Consultations of another model (--consult), by peer "
                                     "and outcome", ["peer", "outcome"], registry=self.registry)
        self.consultation_seconds = Histogram("skippy:consultation_seconds", "Time a consulted peer took to answer "
                                              "or fail (cancelled requests excluded)", ["peer"],
                                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        ProcessCollector(registry=self.registry)
        self.disconnects = self.http.disconnects
        self.engine: Any = None
        self._last: Any = None  # the scheduler snapshot of the previous scrape (throughput gauges)
        # the replies' tokens, counted on the output side (the scheduler decodes past a stop string it does not
        # know of): generated tokens, accepted draft tokens among them, and the finished generations' tokens and
        # generation seconds (the generation throughput gauge)
        self.predicted_tokens = 0
        self.draft_accepted = 0
        self.timed_predicted_tokens = 0
        self.timed_predicted_seconds = 0.0
        self._last_timed = (0, 0.0)  # (timed tokens, seconds) at the previous scrape

    def generated(self, tokens: int, drafted: int) -> None:
        """Count ``tokens`` a generation accepted (its reply's), ``drafted`` of them accepted draft tokens."""
        self.predicted_tokens += tokens
        self.draft_accepted += drafted

    def finished(self, completion_tokens: int, predicted_ms: float) -> None:
        """Count a finished generation's tokens and generation time for the throughput gauge."""
        self.timed_predicted_tokens += completion_tokens
        self.timed_predicted_seconds += predicted_ms / 1000.0

    def attach(self, engine: Any) -> None:
        """Read the live scheduler and hook counters of ``engine`` at scrape time."""
        self.engine = engine
        self.registry.register(_EngineCollector(self))
        times = getattr(engine.scheduler, "step_times", None)
        for hist in times.all() if times is not None else ():
            self.registry.register(hist)

    def response(self, status: int) -> None:
        """Count one response by status class; 499 (the client went away) is counted as a disconnect."""
        self.http.response(status)

    def route_response(self, method: str, route: str, status: int, error_code: str | None = None) -> None:
        """Count one response of ``method`` ``route`` (the path pattern) with ``status``, and its error code."""
        self.http.route_response(method, route, status, error_code)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class HttpMetrics:
    """The HTTP face's counters, registered in ``registry``: ``skippy:http_responses`` (by status class),
    ``skippy:http_route_responses``, ``skippy:errors``, ``skippy:http_client_disconnects``,
    ``skippy:responses_store_errors`` (see the module
    docstring). One engine's :class:`EngineMetrics` holds them when one model is served; the
    :class:`PoolMetrics` of several models holds them once for the server."""

    #: their metric family names (left out of each model's labelled series in :class:`PoolMetrics`)
    NAMES = frozenset({"skippy:http_responses", "skippy:http_route_responses", "skippy:errors",
                       "skippy:http_client_disconnects", "skippy:responses_store_errors"})

    def __init__(self, registry: CollectorRegistry) -> None:
        self.responses = Counter("skippy:http_responses", "HTTP responses by status class", ["status_class"],
                                 registry=registry)
        self.route_responses = Counter("skippy:http_route_responses", "HTTP responses by route and status code",
                                       ["method", "route", "status"], registry=registry)
        self.errors = Counter("skippy:errors", "Error responses (and late SSE error events) by error code",
                              ["code"], registry=registry)
        self.disconnects = Counter("skippy:http_client_disconnects",
                                   "Requests whose client disconnected before the response ended",
                                   registry=registry)
        self.store_errors = Counter("skippy:responses_store_errors",
                                    "Failed calls of the Responses store (--responses-store), by op: get, put, "
                                    "delete", ["op"], registry=registry)

    def response(self, status: int) -> None:
        """Count one response by status class; 499 (the client went away) is counted as a disconnect."""
        if status == 499:
            self.disconnects.inc()
        else:
            self.responses.labels(f"{status // 100}xx").inc()

    def route_response(self, method: str, route: str, status: int, error_code: str | None = None) -> None:
        """Count one response of ``method`` ``route`` (the path pattern) with ``status``, and its error code; a
        method outside HTTP's standard ones counts as ``other`` (a client choosing names must not add series)."""
        label = method if method in HTTP_METHODS else "other"
        self.route_responses.labels(label, route, str(status)).inc()
        if error_code is not None:
            self.errors.labels(error_code).inc()


class PoolMetrics:
    """The metrics of a server of several models (:class:`~skippy.actors.pool.ModelPool`).

    One registry: the server's :class:`HttpMetrics` and ``process_*`` once, each loaded model's engine
    series (its :class:`EngineMetrics` registry but those) with a ``model`` label added (one family per
    name, each model's samples in it), and ``skippy:model_loaded{model}`` (1 loaded, 0 not) and
    ``skippy:model_loading{model}`` (1 loading, 0 not) for every configured model. A model's series start again
    from zero when it is loaded again after an unload.

    ``engines()`` yields ``(model id, EngineMetrics)`` of the loaded models; ``states()`` yields
    ``(model id, state)`` of all of them (``loaded``, ``loading``, ``unloaded``, ``failed``).
    """

    def __init__(self, engines: Callable[[], Iterable[tuple[str, EngineMetrics]]],
                 states: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.http = HttpMetrics(self.registry)
        ProcessCollector(registry=self.registry)
        self.registry.register(_ModelsCollector(engines, states))

    def response(self, status: int) -> None:
        self.http.response(status)

    def route_response(self, method: str, route: str, status: int, error_code: str | None = None) -> None:
        self.http.route_response(method, route, status, error_code)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class _ModelsCollector:
    def __init__(self, engines: Callable[[], Iterable[tuple[str, EngineMetrics]]],
                 states: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self.engines, self.states = engines, states

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        loaded = GaugeMetricFamily("skippy:model_loaded", "Whether the model is loaded (1) or not (0)",
                                   labels=["model"])
        loading = GaugeMetricFamily("skippy:model_loading", "Whether the model is loading (1: a request waits for "
                                    "its load, its wait for room included) or not (0)", labels=["model"])
        for name, state in self.states():
            loaded.add_metric([name], 1.0 if state == "loaded" else 0.0)
            loading.add_metric([name], 1.0 if state == "loading" else 0.0)
        yield loaded
        yield loading
        families: dict[str, Metric] = {}
        for name, metrics in self.engines():
            for metric in metrics.registry.collect():
                if metric.name in HttpMetrics.NAMES or metric.name.startswith("process_"):
                    continue
                family = families.get(metric.name)
                if family is None:
                    family = families[metric.name] = Metric(metric.name, metric.documentation, metric.type,
                                                            metric.unit)
                family.samples += [s._replace(labels={**s.labels, "model": name}) for s in metric.samples]
        yield from families.values()


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
        kv = engine.meta.kv_cache
        if kv is not None:
            yield GaugeMetricFamily("skippy:kv_cache_bytes", "Bytes of the KV cache (K + V, all layers)",
                                    value=kv.bytes)
            yield GaugeMetricFamily("skippy:kv_cache_used_bytes",
                                    "Bytes of the KV cells holding tokens (kv_cache_tokens x bytes per cell)",
                                    value=sched.kv_cells_used * kv.bytes_per_token)
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
        yield CounterMetricFamily("llamacpp:tokens_predicted", "Tokens generated (the replies' completion tokens)",
                                  value=self.metrics.predicted_tokens)
        yield CounterMetricFamily("llamacpp:tokens_predicted_seconds", "Time spent generating (first token to end)",
                                  value=sched.predicted_seconds_total)
        yield CounterMetricFamily("llamacpp:n_decode", "llama_decode() calls", value=sched.steps)
        yield GaugeMetricFamily("llamacpp:n_tokens_max", "Longest sequence seen (prompt + generation)",
                                value=sched.n_tokens_max)
        yield GaugeMetricFamily("llamacpp:n_busy_slots_per_decode", "Average sequences per llama_decode() call",
                                value=sched.busy_slots_total / max(sched.steps, 1))
        d_prompt = sched.timed_prompt_tokens - (last.timed_prompt_tokens if last else 0)
        d_prompt_s = sched.prompt_seconds_total - (last.prompt_seconds_total if last else 0.0)
        timed = (self.metrics.timed_predicted_tokens, self.metrics.timed_predicted_seconds)
        (last_pred, last_pred_s), self.metrics._last_timed = self.metrics._last_timed, timed
        d_pred, d_pred_s = timed[0] - last_pred, timed[1] - last_pred_s
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
        yield GaugeMetricFamily("skippy:ctx_checkpoints", "Context checkpoints held (recurrent, hybrid, SWA models; "
                                "the prompt cache's saved prompts on other models)",
                                value=sched.checkpoints)
        yield GaugeMetricFamily("skippy:ctx_checkpoint_bytes", "Host memory of the context checkpoints held, bytes",
                                value=sched.checkpoint_bytes)
        yield CounterMetricFamily("skippy:ctx_checkpoints_saved", "Context checkpoints saved",
                                  value=sched.checkpoints_saved_total)
        yield CounterMetricFamily("skippy:ctx_checkpoints_restored", "Context checkpoints restored at admission",
                                  value=sched.checkpoints_restored_total)
        yield CounterMetricFamily("skippy:ctx_checkpoints_evicted", "Context checkpoints evicted (per slot or bytes)",
                                  value=sched.checkpoints_evicted_total)
        yield CounterMetricFamily("skippy:spec_draft_tokens", "Speculative draft tokens verified",
                                  value=sched.spec_draft_tokens_total)
        yield CounterMetricFamily("skippy:spec_accepted_tokens", "Speculative draft tokens accepted (those a stop "
                                  "string cut off excluded)", value=self.metrics.draft_accepted)
        yield CounterMetricFamily("skippy:embedding_inputs", "Inputs embedded (/v1/embeddings)",
                                  value=sched.embed_inputs_total)
        yield CounterMetricFamily("skippy:embedding_tokens", "Tokens of the inputs embedded",
                                  value=sched.embed_tokens_total)
        yield CounterMetricFamily("skippy:embedding_batches", "Batches on the embedding context",
                                  value=sched.embed_batches_total)
        yield GaugeMetricFamily("skippy:embedding_requests_waiting", "Embedding requests not answered yet",
                                value=sched.n_embed_waiting)
        if engine.hooks is not None:
            stats = engine.hooks.stats.snapshot()
            for key in ("calls", "timeouts", "errors"):
                fam = CounterMetricFamily(f"skippy:hook_{key}", f"Hook policy {key} by event", labels=["event"])
                for event, counts in stats.items():
                    fam.add_metric([event], counts[key])
                yield fam

"""Consult another model when the model is unsure (``--consult PEER``): the hook policy and its peers.

:class:`ConsultPolicy` is a hook policy (run by the :class:`~skippy.actors.hooks.HookEvaluator` like any
other): at ``after_prefill`` it consults when the first token says the model starts unsure
(:func:`~skippy.engine.hooks.consult.should_consult_start`), at ``mid_generation`` (the signal window
fired) always. A consultation asks the best two peers (:func:`~skippy.engine.hooks.consult.peer_order`)
at once in a trio nursery, all within one ``--consult-timeout`` (a remote peer's first ``/v1/models`` read
included); the first usable answer wins and the other
request is cancelled (a local peer's sequence is cancelled with it, which frees its slot). Its hint is
injected (:func:`~skippy.engine.hooks.consult.injection`) and the model goes on. A peer that fails,
times out or answers nothing gives no action: never an error for the client.

Peers: :class:`LocalPeer`, another model of the same :class:`~skippy.actors.pool.ModelPool`
(``engine.chat(request)``, loading the model if needed), and :class:`RemotePeer`, an OpenAI-compatible
server (``POST {base}/v1/chat/completions``, or ``{base}/chat/completions`` for a base ending in
``/v1``) with ``"mesh_hooks": false`` in the body, its ``model`` and size read from ``/v1/models`` (until
read: a peer down at first is probed again at the next consultation).

Recursion guard: every consultation is a request with ``mesh_hooks`` false, so the peer runs no hooks for
it (a consultation is never consulted) and two servers that consult each other terminate.

Cancellation: the request's sequence cancelled while it waits (its client gone, a Responses cancel), the
evaluator cancels the hook call (:class:`~skippy.actors.hooks.HookCancel`) and with it the consultation: a
remote peer's connection is closed, a local peer's sequence cancelled; each peer asked is counted
``cancelled``.

Composition (:class:`ComposedPolicy`): with ``--hook-policy`` or ``--hook-url`` too, the user's policy
runs first (bounded by ``--hook-timeout``) and the consultation only when it returns no action.

Seeing it: each outcome carries a ``report`` (peer, model, latency, characters injected, the failure's
kind), which ``return_hook_events`` shows as a hook event's ``consult`` object and the request's log line
summarises (peer and milliseconds, never the content); ``/metrics`` counts consultations by peer and
outcome (``skippy:consultations_total``) with a latency histogram (``skippy:consultation_seconds``).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import msgspec
import trio

from skippy.engine.errors import EngineError, InvalidRequest
from skippy.engine.hooks.consult import (
    MAX_PARALLEL,
    ConsultRules,
    PeerInfo,
    PeerStats,
    answer_text,
    consultation_request,
    describe_requests,
    hint_text,
    injection,
    is_url,
    max_reply_bytes,
    peer_order,
    should_consult_start,
    with_descriptions,
)
from skippy.engine.hooks.policy import NO_ACTION, Inject, NoAction, Outcome
from skippy.engine.protocols.openai.types import ChatCompletionRequest

if TYPE_CHECKING:
    from skippy.actors.engine import Engine
    from skippy.actors.metrics import EngineMetrics
    from skippy.engine.config import EngineConfig
    from skippy.engine.hooks.signals import GenerationSignals, PrefillSignals

__all__ = ["LocalModels", "Peer", "LocalPeer", "RemotePeer", "ConsultPolicy", "ComposedPolicy", "build_consult",
           "hook_timeout"]

log = logging.getLogger("skippy.consult")


class LocalModels(Protocol):
    """What a :class:`LocalPeer` needs of the server's models (a :class:`~skippy.actors.pool.ModelPool`)."""

    def match(self, name: str) -> str: ...

    def model(self, name: str) -> Any: ...

    def use(self, name: str | None = None) -> AbstractAsyncContextManager[Engine]: ...

    def could_load(self, name: str) -> bool: ...


class Peer(Protocol):
    """A model to consult: ``name`` (as ``--consult`` gave it), its :class:`PeerStats`, what the peer
    order knows (:meth:`info`), and :meth:`ask`: the answer's text and the model that answered."""

    name: str
    stats: PeerStats

    def info(self) -> PeerInfo: ...

    async def probe(self) -> None: ...

    async def ask(self, request: ChatCompletionRequest) -> tuple[str | None, str | None]: ...

    async def reads_images(self) -> bool: ...


def _file_size(path: Any) -> int | None:
    try:
        return os.path.getsize(str(path))
    except (OSError, ValueError):
        return None


class LocalPeer:
    """Another model of the same server: ``model_id`` in ``models`` (the pool). Its size is its GGUF file's."""

    def __init__(self, name: str, model_id: str, models: LocalModels) -> None:
        self.name, self.model_id, self._models = name, model_id, models
        self.stats = PeerStats()
        self._size = _file_size(models.model(model_id).config.model)

    def info(self) -> PeerInfo:
        return PeerInfo(self.name, self.model_id, self._size, self.stats.mean_ms)

    async def probe(self) -> None:
        """Nothing to learn: the pool knows the model's name and size."""

    async def ask(self, request: ChatCompletionRequest) -> tuple[str | None, str | None]:
        """Answer ``request`` on the pool's engine of the model (loaded first if needed; a cancelled call
        cancels its sequence, freeing the slot). The consultation goes ahead of the requests waiting there
        (``priority`` -1: the asker's slot waits on it). Raises :class:`PeerBusy` when every slot there holds a
        sequence parked on its own hook, at once or as soon as it happens while the consultation waits for a
        slot: none can free its slot before its verdict, which may be waiting on this very consultation (two
        models that consult each other, under load); and at once when the model is not loaded and
        ``--max-loaded`` leaves no room for it but the end of running requests (the asker's among them: the
        load would wait for the consultation it serves)."""
        if not self._models.could_load(self.model_id):
            raise PeerBusy(f"{self.model_id} is not loaded, and --max-loaded leaves no room for it beside the "
                           "models in use")
        async with self._models.use(self.model_id) as engine:
            def stuck() -> bool:
                stats = engine.scheduler.stats()
                return stats.n_parked >= stats.n_slots  # then this consultation is not running (it never parks)

            if stuck():
                raise PeerBusy(f"every slot of {self.model_id} waits on a hook")
            reply = None
            async with trio.open_nursery() as nursery:
                async def answer() -> None:
                    nonlocal reply
                    reply = await engine.chat(msgspec.structs.replace(request, model=self.model_id), priority=-1)
                    nursery.cancel_scope.cancel()

                async def watch() -> None:  # the slots may all park while this consultation waits for one
                    while not stuck():
                        await trio.sleep(BUSY_POLL)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(answer)
                nursery.start_soon(watch)
            if reply is None:
                raise PeerBusy(f"every slot of {self.model_id} waits on a hook")
        return reply.choices[0].message.content, self.model_id

    async def reads_images(self) -> bool:
        """The model has a ``--mmproj`` projector (known from its settings, without loading it)."""
        return self._models.model(self.model_id).config.mmproj is not None


class RemotePeer:
    """An OpenAI-compatible server at ``base`` (``http://host:port`` or ``.../v1``) over ``client``.

    Before its first consultation it reads ``GET {base}/v1/models`` (:meth:`probe`; again before each
    consultation until the server answers it for good): the first model's ``id`` becomes the consultation's
    ``model`` (vLLM and Ollama want one; a server of one model takes any) and its ``meta.n_params`` or
    ``meta.size`` (llama-server's) the peer's size for the peer order. A server without that route is asked
    without a ``model``.
    """

    def __init__(self, base: str, client: httpx.AsyncClient, api_key: str | None = None, *,
                 max_bytes: int = max_reply_bytes(512)) -> None:
        url = httpx.URL(base)
        # credentials in the URL (http://user:password@host) go as Basic auth, never in a URL: the peer's name
        # (hook events, metrics, logs, the note's fallback name) and the requests' URLs (httpx logs them) hold
        # none; else the API key, if any, as a bearer token (--consult-api-key)
        self._auth: Any = httpx.USE_CLIENT_DEFAULT
        if url.userinfo:
            self._auth = httpx.BasicAuth(url.username, url.password)
        elif api_key:
            def bearer(request: httpx.Request) -> httpx.Request:
                request.headers["Authorization"] = f"Bearer {api_key}"
                return request

            self._auth = bearer
        if url.userinfo:
            base = str(url.copy_with(userinfo=b""))
        self.name = base
        root = base.rstrip("/")
        self.v1 = root if root.endswith("/v1") else root + "/v1"
        self.url = self.v1 + "/chat/completions"
        self._client = client
        self.max_bytes = max_bytes  # the most bytes read of a reply (ReplyTooLarge past it)
        self.stats = PeerStats()
        self.model: str | None = None  # the model /v1/models lists first, then the one its last answer named
        self.size: int | None = None
        self._listed: str | None = None
        self._probed = False  # /v1/models answered for good (read, or a 4xx: no such route)
        self._tried = False  # a probe was tried (ask() then leaves probing to the consultations)
        self._vision: bool | None = None

    def info(self) -> PeerInfo:
        return PeerInfo(self.name, self.model, self.size, self.stats.mean_ms)

    async def probe(self) -> None:
        """Read the served model's id and size (never raises): the peer order then knows it before the first
        consultation (a peer serving the asker's own model is left out). Only a definitive answer ends the
        probing: a 2xx reply (read, whatever it holds, or past the reply's cap) or a 4xx but 408 and 429 (the
        route is not there, or not for us); a connection error, a timeout, a 408, 429 or 5xx leave it to the
        next call (the next consultation), the model and size unknown meanwhile."""
        if self._probed:
            return
        self._tried = True
        try:
            status, data = await self._request("GET", self.v1 + "/models")
        except httpx.HTTPError:
            return
        except ReplyTooLarge:  # a list past the cap: not read again
            self._probed = True
            return
        if status in TRANSIENT_STATUS or status >= 500:
            return
        self._probed = True
        try:
            first = data["data"][0]
        except (KeyError, IndexError, TypeError):
            return
        if isinstance(first, dict) and isinstance(first.get("id"), str) and first["id"]:
            self._listed = self.model = first["id"]
            meta = first.get("meta")
            if isinstance(meta, dict):
                size = meta.get("n_params") or meta.get("size")
                if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                    self.size = size

    async def reads_images(self) -> bool:
        """Whether the server says it reads images: ``GET {root}/props`` ``modalities.vision`` (skippy's and
        llama-server's; read once, a later call after a failure asks again). A server without ``/props``
        (vLLM, Ollama) is taken as text-only: it is not asked to describe images."""
        if self._vision is None:
            root = self.v1[:-len("/v1")]
            try:
                status, data = await self._request("GET", root + "/props", check=True)
                modalities = data.get("modalities")
            except (httpx.HTTPError, ReplyTooLarge, AttributeError):
                return False
            self._vision = isinstance(modalities, dict) and modalities.get("vision") is True
        return self._vision

    async def ask(self, request: ChatCompletionRequest) -> tuple[str | None, str | None]:
        """POST the request (``mesh_hooks`` false, not streamed; ``model`` the one ``/v1/models`` lists
        first, when it does: probed first when no probe was tried yet, else left to :meth:`probe`, which a
        consultation calls before its peer order); raises ``httpx.HTTPStatusError`` for a non-2xx reply,
        ``ValueError`` for a body that is no chat completion."""
        if not self._tried:
            await self.probe()
        body = msgspec.to_builtins(request)
        body.update(mesh_hooks=False, stream=False)
        if self._listed is not None:
            body["model"] = self._listed
        status, data = await self._request("POST", self.url, json=body, check=True)
        try:
            content = data["choices"][0]["message"].get("content")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ValueError("the reply is not a chat completion") from None
        model = data.get("model") if isinstance(data.get("model"), str) else None
        if model:
            self.model = model
        return answer_text(content), model

    async def _request(self, method: str, url: str, *, check: bool = False, **kw: Any) -> tuple[int, Any]:
        """``(status, body as JSON)`` of one request, its reply streamed and read up to :attr:`max_bytes`
        (:class:`ReplyTooLarge` past it, the connection closed unread). A non-2xx reply's body is not read
        (``None``); with ``check`` it raises ``httpx.HTTPStatusError`` instead. A 2xx body that is not JSON is
        ``None``."""
        async with self._client.stream(method, url, auth=self._auth, **kw) as resp:
            if not resp.is_success:
                if check:
                    resp.raise_for_status()
                return resp.status_code, None
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise ReplyTooLarge(f"{declared} bytes, more than {self.max_bytes}")
            chunks, size = [], 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self.max_bytes:
                    raise ReplyTooLarge(f"more than {self.max_bytes} bytes")
                chunks.append(chunk)
        try:
            return resp.status_code, json.loads(b"".join(chunks))
        except (ValueError, RecursionError):  # RecursionError: JSON nested past Python's recursion limit
            return resp.status_code, None


#: statuses of ``GET /v1/models`` that say "not now" rather than "no such route": probed again later (and any 5xx)
TRANSIENT_STATUS = frozenset({408, 429})

#: seconds between two looks at a local peer's slots while a consultation waits for one
BUSY_POLL = 0.05


class ReplyTooLarge(Exception):
    """A peer's reply holds more than its cap (:func:`~skippy.engine.hooks.consult.max_reply_bytes`): dropped
    unread, reported as ``too_large``."""


class PeerBusy(Exception):
    """A local peer cannot take a consultation now (every slot holds a parked sequence): reported as ``busy``."""


def _error_kind(exc: BaseException) -> str:
    """A short name of a consultation's failure for reports and logs (never the peer's text)."""
    if isinstance(exc, PeerBusy):
        return "busy"
    if isinstance(exc, ReplyTooLarge):
        return "too_large"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"http_{exc.response.status_code}"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, EngineError):
        return exc.code or exc.type
    return type(exc).__name__


class ConsultPolicy:
    """The consultation hook policy (see the module docstring).

    ``rules``: the settings; ``peers``: in ``--consult`` order; ``asker``: every name the asking model
    answers to (a peer serving one of them is never asked); ``metrics``: the asking engine's
    (:class:`~skippy.actors.metrics.EngineMetrics`; ``None``: not counted), set once the engine exists.
    """

    def __init__(self, rules: ConsultRules, peers: Sequence[Peer], asker: Sequence[str]) -> None:
        self.rules = rules
        self.peers = list(peers)
        self.asker = tuple(asker)
        self.metrics: EngineMetrics | None = None

    async def after_prefill(self, request: Any, signals: PrefillSignals) -> Outcome | None:
        if not should_consult_start(signals, self.rules):
            return None
        return await self.consult(request)

    async def mid_generation(self, request: Any, signals: GenerationSignals) -> Outcome | None:
        return await self.consult(request)

    async def consult(self, request: Any) -> Outcome:
        """Ask the best peers about ``request``'s last user message; an :class:`Inject` of the first usable
        answer, else :data:`NO_ACTION` with the report (never raises for a peer's fault). The whole
        consultation (the remote peers' ``/v1/models`` probes, then the questions) runs within one
        ``--consult-timeout``; a report's ``latency_ms`` counts from its start."""
        if getattr(request, "mesh_hooks", None) is False:  # a consultation is never itself consulted
            return NO_ACTION
        # one deadline for the whole consultation: the peers' /v1/models probes, then the questions (a remote
        # POST, a local peer's wait for a slot and its generation); the evaluator's bound (hook_timeout) is
        # --consult-timeout + 1 s past it, so it never cuts a consultation short
        t0 = trio.current_time()
        deadline = t0 + self.rules.timeout
        with trio.move_on_at(deadline):  # each remote peer's /v1/models, until read, before the order
            async with trio.open_nursery() as nursery:
                for peer in self.peers:
                    nursery.start_soon(peer.probe)
        by_name = {p.name: p for p in self.peers}
        chosen = [by_name[i.name] for i in peer_order([p.info() for p in self.peers], self.asker)][:MAX_PARALLEL]
        question = consultation_request(request, self.rules)
        if question is None or not chosen:
            why = "no user text to ask about" if question is None else "no peer serves another model"
            return NoAction(report={"peer": self.peers[0].name if self.peers else "-", "outcome": "skipped",
                                    "error": why})
        winner: dict[str, Any] | None = None
        failures: list[dict[str, Any]] = []

        async def one(peer: Peer, cancel: trio.CancelScope) -> None:
            nonlocal winner
            outcome, error, content, model = "answered", None, None, None
            try:
                with trio.move_on_at(deadline) as scope:
                    content, model = await peer.ask(question)
                if scope.cancelled_caught:
                    outcome = "timeout"
            except Exception as exc:  # a peer's failure is no action, never the client's error
                outcome, error = "error", _error_kind(exc)
                if error == "timeout":
                    outcome = "timeout"
                log.info("consultation of %s failed: %s", peer.name, error)
            except BaseException:  # cancelled (the other peer answered first, or the client left), also when it
                # comes out of a local peer's nursery as a group of Cancelled
                self._count(peer.name, "cancelled", None)
                raise
            ms = (trio.current_time() - t0) * 1000.0  # from the consultation's start: the probes' wait included
            hint = hint_text(content, self.rules.max_chars) if outcome == "answered" else None
            if outcome == "answered" and hint is None:
                outcome = "empty"
            self._count(peer.name, outcome, ms)
            report: dict[str, Any] = {"peer": peer.name, "outcome": outcome, "model": model,
                                      "latency_ms": round(ms, 1), "error": error}
            if hint is not None and winner is None:
                peer.stats.observe(ms)
                winner = {**report, "chars": len(hint), "hint": hint}
                cancel.cancel()
            elif hint is None:
                failures.append(report)

        async with trio.open_nursery() as nursery:
            for peer in chosen:
                nursery.start_soon(one, peer, nursery.cancel_scope)
        if winner is not None:
            hint = winner.pop("hint")
            return Inject(injection(winner["model"] or winner["peer"], hint), report=winner)
        first = next((f for p in chosen for f in failures if f["peer"] == p.name), failures[0])
        return NoAction(report=first)

    async def describe_images(self, request: ChatCompletionRequest) -> tuple[ChatCompletionRequest, dict[str, Any]]:
        """Media fallback (``before_chat``): ``request`` for a model that reads text only, with each message's
        images replaced by ``[Image description: ...]`` before its text, as the first peer that reads images
        (``--consult`` order) describes them (:func:`~skippy.engine.hooks.consult.describe_requests`, one
        request per message, each within ``--consult-timeout``). Raises :class:`InvalidRequest` (400
        ``media_not_supported``) naming ``--consult`` when no peer reads images or the peer fails. Returns
        the new request and the report a ``before_chat`` hook event carries (peer, model, milliseconds,
        characters, ``outcome`` ``described``)."""
        peer = None
        for candidate in self.peers:
            with trio.move_on_after(self.rules.timeout):  # a peer that trickles its /props: not one that reads them
                if await candidate.reads_images():
                    peer = candidate
                    break
        if peer is None:
            raise InvalidRequest("this model reads text only and no --consult peer reads images (a peer needs "
                                 "a --mmproj projector) to describe them", param="messages", code="media_not_supported")
        descriptions: dict[int, str] = {}
        model = None
        total_ms = 0.0
        for i, question in describe_requests(request, self.rules):
            t0 = trio.current_time()
            error = None
            content = None
            try:
                with trio.fail_after(self.rules.timeout):
                    content, model = await peer.ask(question)
            except (Exception, trio.TooSlowError) as exc:
                error = "timeout" if isinstance(exc, trio.TooSlowError) else _error_kind(exc)
            ms = (trio.current_time() - t0) * 1000.0
            total_ms += ms
            hint = hint_text(content, self.rules.max_chars) if error is None else None
            self._count(peer.name, "described" if hint else "error" if error else "empty", ms)
            log.info("media fallback: %s described messages[%d]'s images in %.0f ms%s", peer.name, i, ms,
                     f" (failed: {error})" if error else "" if hint else " (empty)")
            if hint is None:
                raise InvalidRequest(f"this model reads text only and the --consult peer {peer.name} could not "
                                     f"describe the images of messages[{i}] ({error or 'empty answer'})",
                                     param=f"messages[{i}]", code="media_not_supported")
            descriptions[i] = hint
        report = {"peer": peer.name, "model": model, "outcome": "described", "latency_ms": round(total_ms, 1),
                  "chars": sum(len(d) for d in descriptions.values()), "error": None}
        return with_descriptions(request, descriptions), report

    def _count(self, peer: str, outcome: str, ms: float | None) -> None:
        if self.metrics is not None:
            self.metrics.consultations.labels(peer, outcome).inc()
            if ms is not None:
                self.metrics.consultation_seconds.labels(peer).observe(ms / 1000.0)


class ComposedPolicy:
    """A user's hook policy (``--hook-policy`` / ``--hook-url``) with the consultation: the user's
    ``after_prefill`` / ``mid_generation`` runs first, within ``user_timeout`` seconds (``--hook-timeout``;
    past it the call fails with ``trio.TooSlowError``, a hook failure), and the consultation runs only when it
    returns no action. ``before_chat`` and ``on_finish`` are the user's own (absent when the user's policy has
    none), held to ``user_timeout`` too: the evaluator's own bound is longer (:func:`hook_timeout`: the user's
    part and a whole consultation)."""

    def __init__(self, user: Any, consult: ConsultPolicy, user_timeout: float) -> None:
        self.user, self.consult, self.user_timeout = user, consult, user_timeout
        for event in ("before_chat", "on_finish"):
            if callable(getattr(user, event, None)):
                setattr(self, event, self._bounded(event))

    def _bounded(self, event: str) -> Any:
        async def call(request: Any, *payload: Any) -> Any:
            return await self._user(event, request, *payload)

        return call

    async def _user(self, event: str, request: Any, *payload: Any) -> Any:
        method = getattr(self.user, event, None)
        if not callable(method):
            return None
        with trio.fail_after(self.user_timeout):
            result = method(request, *payload)
            if inspect.isawaitable(result):
                result = await result
        return result

    async def after_prefill(self, request: Any, signals: PrefillSignals) -> Any:
        result = await self._user("after_prefill", request, signals)
        if result is not None and not isinstance(result, NoAction):
            return result
        return await self.consult.after_prefill(request, signals)

    async def mid_generation(self, request: Any, signals: GenerationSignals) -> Any:
        result = await self._user("mid_generation", request, signals)
        if result is not None and not isinstance(result, NoAction):
            return result
        return await self.consult.mid_generation(request, signals)


def hook_timeout(config: EngineConfig) -> float:
    """The hook evaluator's timeout (seconds): ``--hook-timeout``; with ``--consult`` at least
    ``--consult-timeout`` + 1 s (a consultation, probes and questions together, runs within one
    ``--consult-timeout``); with ``--consult`` and a user policy (``--hook-policy`` / ``--hook-url``:
    :class:`ComposedPolicy`) the sum of both, ``--hook-timeout`` + ``--consult-timeout`` + 1 s, as the user's
    part runs first (within its own ``--hook-timeout``) and the consultation after it. So the evaluator never
    cuts a consultation short."""
    if not config.consult:
        return config.hook_timeout
    consultation = config.consult_timeout + 1.0
    if config.hook_policy is not None or config.hook_url:
        return config.hook_timeout + consultation
    return max(config.hook_timeout, consultation)


def _asker_names(config: EngineConfig, models: LocalModels | None) -> list[str]:
    path = Path(str(config.model))
    names = [n for n in (config.model_name, *config.model_alias, path.stem, path.name) if n]
    if models is not None:
        try:
            names += list(models.model(models.match(config.model_name or path.stem)).names)
        except (EngineError, KeyError):
            pass
    return list(dict.fromkeys(names))


def build_consult(config: EngineConfig, models: LocalModels | None) -> tuple[ConsultPolicy, httpx.AsyncClient | None]:
    """The :class:`ConsultPolicy` of ``config.consult`` and the HTTP client its remote peers share (``None``
    without one; the caller closes it). A model-name peer needs ``models`` (the pool); without it, or for
    a name it does not serve, the peer is left out with a warning (``skippy serve`` checks the names at
    start-up: :func:`~skippy.engine.hooks.consult.check_peers`)."""
    client = None
    peers: list[Peer] = []
    for peer in config.consult:
        if is_url(peer):
            if client is None:
                client = httpx.AsyncClient(timeout=config.consult_timeout + 1.0, trust_env=False)
            peers.append(RemotePeer(peer, client, config.consult_api_key,
                                    max_bytes=max_reply_bytes(config.consult_max_chars)))
            continue
        if models is None:
            log.warning("--consult %s: no other models here (an engine outside a pool); left out", peer)
            continue
        try:
            peers.append(LocalPeer(peer, models.match(peer), models))
        except EngineError:
            log.warning("--consult %s: not a model this server serves; left out", peer)
    return ConsultPolicy(ConsultRules.from_engine_config(config), peers, _asker_names(config, models)), client

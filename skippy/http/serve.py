"""Run the HTTP app under hypercorn (trio worker) next to the engine.

The server binds and answers ``/health`` (503) at once while the model
loads in a worker thread; when the engine is ready ``/health`` turns 200,
and the start-up log says which chat template is used and, once, where the
server runs (``Running on http://127.0.0.1:8080``). It listens on every
address given (IPv4 and IPv6 alike), with TLS on all of them when
``ServerSettings.ssl_cert_file`` / ``ssl_key_file`` are set.

Graceful shutdown on SIGINT/SIGTERM: the listening sockets close (new
connections are refused), requests arriving on open connections get 503,
running requests and streams may finish for ``shutdown_grace`` seconds;
then what still runs is cancelled (a final SSE error event for streams),
the engine is closed and :func:`serve` returns 0. A second signal cancels
at once. Idle keep-alive connections are closed as soon as no request runs
(at once when none does), as llama-server does: a client's connection pool
never holds the exit back.
"""

from __future__ import annotations

import gc
import logging
import re
import signal
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from http import HTTPStatus
from typing import Any

import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.protocol.http_stream import HTTPStream
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState, LifespanState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app
from quart_trio import QuartTrio

from skippy.actors.engine import Engine
from skippy.actors.pool import ModelPool, pool_models
from skippy.actors.store import StoreClient
from skippy.engine.config import EngineConfig
from skippy.engine.errors import EngineError
from skippy.engine.protocols.responses.store import StoreError, open_store
from skippy.http.app import AppState, Lifecycle, create_app
from skippy.http.asgi import TARGET_QUOTED_MAX, error_body, record_answer
from skippy.http.context import EXTENSION, REQUEST_ID, SERVER_ANSWER, Shared, client_of, request_id_from
from skippy.http.settings import ServerSettings

log = logging.getLogger("skippy.serve")


def hypercorn_config(host: str | Sequence[str], port: int, *, shutdown_grace: float = 30.0,
                     ssl_cert_file: str | None = None, ssl_key_file: str | None = None) -> HypercornConfig:
    """hypercorn settings: one bind per address of ``host`` (a string or several), listen backlog 2048,
    keep-alive on, no access log (we log per request), hypercorn's messages through our logging.

    hypercorn's own ``graceful_timeout`` is the last resort after our grace period
    (``shutdown_grace`` plus 5 s for the final SSE events to flush). With both ``ssl_cert_file``
    and ``ssl_key_file`` (PEM paths) every bind serves TLS (hypercorn's ``secure_sockets``).
    """
    cfg = HypercornConfig()
    hosts = [host] if isinstance(host, str) else list(host)
    cfg.bind = [f"[{h}]:{port}" if ":" in h else f"{h}:{port}" for h in hosts]
    cfg.backlog = 2048
    cfg.keep_alive_timeout = 75
    cfg.accesslog = None
    cfg.errorlog = logging.getLogger("hypercorn.error")  # no handler of its own: the root's format (text or JSON)
    cfg.graceful_timeout = shutdown_grace + 5
    if ssl_cert_file and ssl_key_file:
        cfg.certfile, cfg.keyfile = ssl_cert_file, ssl_key_file
    return cfg


class BurstListener(trio.abc.Listener[trio.SocketStream]):
    """A TCP listener that takes every connection waiting in the kernel's accept queue at once.

    ``trio.SocketListener.accept`` returns one connection per scheduler pass, and a pass
    lasts as long as all the work runnable at that moment. Under a connect burst of N
    clients, a connection arriving just after the burst (a ``/health`` probe) waited for N
    passes: ~1 s for N = 256 on 2 cores. This listener waits like ``SocketListener`` for
    the first connection, then accepts the rest of the queue without yielding (non-blocking
    ``accept(2)`` until ``EAGAIN``) and hands the queued streams out in arrival order.

    ``sock`` is the bound, listening stdlib socket; the listener owns it from here on.
    Accept errors during the drain stop the drain; the next ``accept`` meets them through
    ``SocketListener`` (``trio.serve_listeners`` backs off on ``EMFILE`` and the like).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))  # sets O_NONBLOCK on sock
        self._queued: deque[trio.SocketStream] = deque()

    async def accept(self) -> trio.SocketStream:
        """The next connection: one already drained, else wait for one and drain the queue behind it."""
        if self._queued:
            await trio.lowlevel.checkpoint_if_cancelled()
            return self._queued.popleft()
        stream = await self._listener.accept()
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # BlockingIOError: the queue is empty
                break
            self._queued.append(trio.SocketStream(trio.socket.from_stdlib_socket(conn)))
        return stream

    async def aclose(self) -> None:
        """Close the listening socket and every drained connection not yet handed out."""
        while self._queued:
            await trio.aclose_forcefully(self._queued.popleft())
        await self._listener.aclose()


#: bytes of a request's head kept for the log line of an answer to a request that hypercorn cannot parse
HEAD_KEPT = 1024
#: longest part of h11's reason quoted in the answer's message
DETAIL_MAX = 300
_REQUEST_ID_HEADER = re.compile(rb"^x-request-id[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
_BYTES_REPR = re.compile(r"bytearray\(b('.*'|\".*\")\)", re.DOTALL)


def protocol_error(status: int, detail: str, *, head_limit: int) -> tuple[str, str, str]:
    """``(message, type, code)`` of the error envelope of hypercorn's own answer ``status`` to a request that
    breaks HTTP/1.1 (``detail``: h11's reason: ``illegal request line``, ``Missing mandatory Host: header``...):
    400 ``bad_request``, 431 ``request_header_fields_too_large`` (more than ``head_limit`` bytes of a head
    buffered before its end: hypercorn's ``h11_max_incomplete_size``), 501 ``not_implemented`` (a
    ``Transfer-Encoding`` other than ``chunked``)."""
    detail = _BYTES_REPR.sub(r"\1", detail)[:DETAIL_MAX]  # h11 quotes the offending bytes as bytearray(b'...')
    if status == 431:
        return (f"the request line and headers are too large: more than {head_limit} bytes came before their end",
                "invalid_request_error", "request_header_fields_too_large")
    if status == 501:
        return f"unsupported HTTP request: {detail}", "not_supported_error", "not_implemented"
    try:
        code = HTTPStatus(status).phrase.lower().replace(" ", "_")
    except ValueError:
        code = "bad_request"
    return f"malformed HTTP request: {detail}", "invalid_request_error" if status < 500 else "server_error", code


def request_line(head: bytes) -> str:
    """What the log line names a request by when hypercorn could not parse it: ``METHOD TARGET`` of its request
    line, else the first line as sent (at most :data:`~skippy.http.asgi.TARGET_QUOTED_MAX` bytes, those past
    ASCII as ``\\xNN``; the log escapes control characters: a TLS handshake on the plain port shows as
    ``\\x16\\x03...``), ``-`` when nothing came."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    parts = line.split(b" ")
    if len(parts) == 3 and parts[2].startswith(b"HTTP/"):
        line = parts[0] + b" " + parts[1]
    return line[:TARGET_QUOTED_MAX].decode("ascii", "backslashreplace") or "-"


class _Connection(h11.Connection):
    """h11's server connection, which keeps the error of what the client sent that broke HTTP/1.1 (``error``)
    and tells ``on_next_cycle`` what it holds of the next request when it starts one (the bytes that came
    behind the previous request, pipelined: h11's ``trailing_data``)."""

    error: h11.RemoteProtocolError | None = None

    def __init__(self, *args: Any, on_next_cycle: Callable[[bytes], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_next_cycle = on_next_cycle

    def start_next_cycle(self) -> None:
        super().start_next_cycle()
        self._on_next_cycle(self.trailing_data[0])

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise


class _H11Protocol(H11Protocol):
    """hypercorn's HTTP/1.1 protocol, whose own answers to what breaks HTTP/1.1 are answered as the app's errors.

    hypercorn answers a request it cannot parse itself, before the app sees it: 400 (a malformed request line
    or header, no ``Host``, a malformed chunk of a body), 431 (more than ``h11_max_incomplete_size`` bytes of a
    request line and headers buffered before their end: h11 checks it between reads, so a larger head whose end
    comes in the same read passes), 501 (a ``Transfer-Encoding`` other than ``chunked``), each with an empty body
    and ``Connection: close``, no log line and no count. Here the answer carries the OpenAI error envelope (the
    message says what was wrong), ``X-Request-Id`` (the client's, when its head has a valid one) and, on a 501,
    ``X-Should-Retry: false`` (as the app's 501s); the connection still closes after it. A request whose head
    broke gets the log line of the app's requests (INFO, ``code=`` and ``reason=``; named by its request line, or
    what came instead of one) and is counted in ``/metrics`` under the route ``unmatched``; one that the client
    abandoned half-sent is logged and counted as a client disconnect. A request whose body broke the framing
    was already the app's: its route's view logs and counts the answer (:data:`SERVER_ANSWER`), which carries the
    request's id (:data:`REQUEST_ID`); a view that answered without reading the body logs and counts its own
    answer while the client gets the 400. A WebSocket handshake goes to the app as a plain ``GET``
    (:meth:`_create_stream`). ``metrics()``: the server's metrics (``None`` while the first model loads: those
    answers are logged, not counted).
    """

    def __init__(self, *args: Any, metrics: Callable[[], Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = _Connection(h11.SERVER, max_incomplete_event_size=self.config.h11_max_incomplete_size,
                                      on_next_cycle=self._next_head)
        self._metrics = metrics
        self._head = bytearray()  # the first bytes of the request not parsed yet (for the log line)
        self._t0 = 0.0  # when they came (perf_counter)
        self._eof = False  # the client closed its side

    def _next_head(self, pending: bytes) -> None:
        # a new request cycle: what h11 holds already (a request pipelined behind the last one, in the same read)
        # is the start of the next head; the bytes that come from here on are added to it (handle)
        self._head = bytearray(pending[:HEAD_KEPT])
        self._t0 = time.perf_counter() if pending else 0.0

    async def handle(self, event: Event) -> None:
        if isinstance(event, RawData):
            if not event.data:
                self._eof = True
            elif self.connection.their_state is h11.IDLE and len(self._head) < HEAD_KEPT:
                if not self._head:
                    self._t0 = time.perf_counter()
                self._head += event.data[:HEAD_KEPT - len(self._head)]
        await super().handle(event)

    async def _create_stream(self, request: h11.Request) -> None:
        self._head.clear()  # parsed: the app has it
        if any(name == b"upgrade" and value.strip().lower() == b"websocket" for name, value in request.headers):
            # no WebSocket stream (the server serves none): the handshake goes to the app as the plain GET it also
            # is (skippy.http.asgi), not to hypercorn's WebSocket handling, whose own 400s (a handshake it finds
            # invalid, bytes right behind one) were empty, unlogged, and the first left the connection open
            request = h11.Request(method=request.method, target=request.target, http_version=request.http_version,
                                  headers=[(n, v) for n, v in request.headers.raw_items() if n.lower() != b"upgrade"])
        await super()._create_stream(request)

    async def _send_error_response(self, status_code: int) -> None:
        error = self.connection.error if isinstance(self.connection, _Connection) else None
        message, type_, code = protocol_error(status_code, str(error) if error else HTTPStatus(status_code).phrase,
                                              head_limit=self.config.h11_max_incomplete_size)
        stream = self.stream
        if isinstance(stream, HTTPStream) and hasattr(stream, "scope"):  # the app has the request: its body broke
            if not self._eof:
                stream.scope["state"][SERVER_ANSWER] = (status_code, code, message)
            sent = next((v.decode("latin-1") for k, v in stream.scope["headers"] if k.lower() == b"x-request-id"),
                        None)
            # the app's id of the request (its log line's), or one it takes from here when it has not made it yet
            rid = stream.scope["state"].setdefault(REQUEST_ID, request_id_from(sent))
        else:
            found = _REQUEST_ID_HEADER.search(bytes(self._head))
            rid = request_id_from(found.group(1).decode("latin-1") if found else None)
            record_answer(self._metrics(), request_line(bytes(self._head)), status_code, request_id=rid,
                          client=client_of({"client": self.client}),
                          duration_ms=(time.perf_counter() - self._t0) * 1000.0 if self._head else 0.0,
                          code=code, reason=message, disconnected=self._eof)
        body = error_body(message, type_, code)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        headers.append((b"x-request-id", rid.encode()))
        if status_code == 501:
            headers.append((b"x-should-retry", b"false"))
        await self._send_h11_event(h11.Response(status_code=status_code,
                                                headers=[*headers, *self.config.response_headers("h11")]))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())


class _TCPServer(TCPServer):
    """hypercorn's connection handler, with three fixes that keep one connection from harming the others.

    - It closes the socket when the response says ``Connection: close``. hypercorn 0.18 closes from inside
      the app's task, and quart-trio cancels that task as the response ends, so the close was cancelled and
      the connection stayed open until the client closed it (a client reading to EOF, HTTP/1.0 style, hung;
      hypercorn issue #330). Closing is quick (``shutdown(2)`` and ``close(2)``), so it runs shielded.
    - An error in hypercorn's protocol code ends that connection only, logged as a warning. It used to
      escape the connection's task and end the whole server: over HTTP/2, request body data that came
      after the answer to a body the app never read (a 401, a 404: a ``KeyError`` for the finished stream),
      or a ``CONNECT`` request (an ``UnboundLocalError``).
    - A client that closes its side stops the keep-alive timer. A connection closed before its first
      byte (a TCP health check, a port scan) kept its socket, in CLOSE-WAIT, for the whole
      75 s idle timeout (``keep_alive_timeout``): a connect-and-close loop used up the file descriptors.

    And its HTTP/1.1 connections answer what breaks HTTP/1.1 as the app answers errors (:class:`_H11Protocol`:
    an envelope, the log line, the counters); ``metrics()`` is where they are counted. HTTP/2 has no such
    answers: h2 meets a malformed frame or header block with ``GOAWAY`` or ``RST_STREAM``, which carry no body.
    """

    def __init__(self, *args: Any, metrics: Callable[[], Any] = lambda: None) -> None:
        super().__init__(*args)
        self._metrics = metrics

    @property
    def protocol(self) -> ProtocolWrapper:
        return self._protocol

    @protocol.setter
    def protocol(self, wrapper: ProtocolWrapper) -> None:
        # TCPServer.run makes the ProtocolWrapper, which makes hypercorn's H11Protocol for an HTTP/1.1 connection
        # (there is no hook for another class): it is replaced by ours before it has seen a byte
        if type(wrapper.protocol) is H11Protocol:
            wrapper.protocol = _H11Protocol(wrapper.app, wrapper.config, wrapper.context, wrapper.task_group,
                                            wrapper.state, wrapper.ssl, wrapper.client, wrapper.server, wrapper.send,
                                            metrics=self._metrics)
        self._protocol = wrapper

    async def run(self) -> None:
        try:
            await super().run()
        except Exception as exc:  # hypercorn's protocol code failed on what this client sent (see above)
            log.warning("connection closed: the HTTP protocol handling failed on what the client sent (%s: %s)",
                        type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, Closed):
            with trio.CancelScope(shield=True):
                await super().protocol_send(event)
        else:
            await super().protocol_send(event)

    async def _read_data(self) -> None:
        await super()._read_data()
        await self.idle_task.stop()  # nothing more comes: the connection ends once its requests have


async def _close_when(drained: trio.Event, scope: trio.CancelScope) -> None:
    await drained.wait()
    scope.cancel()


def listen_urls(sockets: Sockets) -> list[str]:
    """``https://ADDR:PORT`` for each TLS socket, then ``http://ADDR:PORT`` for each plain one (as hypercorn)."""
    return ([f"https://{repr_socket_addr(s.family, s.getsockname())}" for s in sockets.secure_sockets]
            + [f"http://{repr_socket_addr(s.family, s.getsockname())}" for s in sockets.insecure_sockets])


async def _worker_serve(app: AppWrapper, config: HypercornConfig, sockets: Sockets,
                        shutdown_trigger: Callable[[], Awaitable[None]], drained: trio.Event,
                        metrics: Callable[[], Any] = lambda: None) -> None:
    """hypercorn's ``trio.run.worker_serve``, accepting through :class:`BurstListener`.

    Same lifespan, connection handling (``TCPServer``), TLS (``trio.SSLListener`` with
    hypercorn's ``create_ssl_context``, ``https_compatible=True``, over the burst listener
    instead of a ``SocketListener``), shutdown trigger and ``graceful_timeout`` as hypercorn
    0.17/0.18. The listener differs (hypercorn builds its ``SocketListener`` inside
    ``worker_serve``, with no hook to replace it), and so does the close of a
    ``Connection: close`` response (:class:`_TCPServer`).

    What the copy drops from hypercorn's ``worker_serve`` (none of it is configurable in
    ``skippy serve``):

    - statsd metrics: no ``config.set_statsd_logger_class(StatsdLogger)``, so
      ``statsd_host`` is ignored (skippy exports Prometheus ``/metrics`` instead);
    - ``max_requests`` / ``max_requests_jitter``: ``WorkerContext(None)``, the worker is
      never asked to restart after N requests;
    - the "Running on ..." lines: :func:`serve` logs them once the model is loaded (hypercorn
      logs them as it starts listening, before the server can answer);
    - QUIC / HTTP/3: ``quic_sockets`` get no ``UDPServer``;
    - creating and listening the sockets: ``sockets`` is required and already listening
      (:func:`serve` does it, so a port in use is reported before the model loads);
    - ``task_status.started(binds)``: it is awaited directly, not ``nursery.start``-ed;
    - an optional ``shutdown_trigger``: ours is required.

    Added: once shutting down, ``drained`` (set when no request runs any more) cancels the
    connection handlers at once: what is left are idle keep-alive connections, which
    hypercorn would otherwise keep until ``graceful_timeout``. ``metrics()``: where the
    connections count the answers hypercorn makes itself (:class:`_TCPServer`).

    ``tests/unit/test_serve.py`` pins a hash of the installed ``worker_serve`` source: a
    hypercorn upgrade that changes it fails there, and this copy must be re-checked.
    """
    lifespan_state: LifespanState = {}
    lifespan = Lifespan(app, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            listeners: list[trio.abc.Listener] = []
            if sockets.secure_sockets:
                ssl_context = config.create_ssl_context()
                assert ssl_context is not None  # create_sockets makes secure sockets only when ssl_enabled
                listeners += [trio.SSLListener(BurstListener(sock), ssl_context, https_compatible=True)
                              for sock in sockets.secure_sockets]
            listeners += [BurstListener(sock) for sock in sockets.insecure_sockets]
            handler = partial(_TCPServer, app, config, context, ConnectionState(lifespan_state.copy()),
                              metrics=metrics)
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(partial(trio.serve_listeners, handler, listeners,
                                               handler_nursery=server_nursery))
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
                if other_errors is not None:
                    raise other_errors  # noqa: B904 (as in hypercorn's worker_serve, which this copies)
            finally:
                await context.terminated.set()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
                server_nursery.start_soon(_close_when, drained, server_nursery.cancel_scope)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _watch_signals(stop: trio.Event, lifecycle: Lifecycle, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """First SIGINT/SIGTERM sets ``stop``; a second one cancels running requests at once."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for sig in signals:
            if not stop.is_set():
                log.info("received %s, shutting down (running requests may finish)", signal.Signals(sig).name)
                stop.set()
            else:
                log.info("received %s again, cancelling running requests", signal.Signals(sig).name)
                lifecycle.expire()


async def _shut_down(lifecycle: Lifecycle, sockets: Sockets, grace: float, drained: trio.Event) -> None:
    """Refuse new connections, let running requests finish for ``grace`` seconds, then cancel them;
    ``drained`` is set once no request runs (cancelled ones get up to 5 s to send their last event)."""
    lifecycle.drain()
    # hypercorn stops its accept loops when the shutdown trigger returns; once they are
    # cancelled, closing the listening sockets makes new connections fail fast (refused)
    await trio.sleep(0.05)
    for sock in [*sockets.insecure_sockets, *sockets.secure_sockets]:
        sock.close()
    with trio.move_on_after(grace):
        while lifecycle.running:
            await trio.sleep(0.05)
    if lifecycle.running:
        log.info("shutdown grace of %gs is over: cancelling %d running requests", grace, lifecycle.running)
    lifecycle.expire()
    with trio.move_on_after(5):
        while lifecycle.running:
            await trio.sleep(0.05)
    drained.set()


def _freeze_heap() -> None:
    """Move every object alive after start-up into the GC's permanent generation (``gc.freeze``).

    A full (generation 2) collection walks every tracked object; with the model, the
    template, Quart and hypercorn loaded, one took 54-82 ms on the trio thread, which
    stalls every request and ``/health`` probe for that long. Frozen objects are never
    walked, so later collections only see per-request objects. (CPython's advice for
    servers; vLLM freezes its start-up heap too.)
    """
    gc.collect()
    gc.freeze()


def _log_chat_template(engine: Engine) -> None:
    """Say which chat template renders the prompts; warn when the GGUF has none and ChatML stands in."""
    if engine.config.chat_template:
        log.info("chat template: from --chat-template (%d chars)", len(engine.config.chat_template))
    elif engine.meta.chat_template:
        log.info("chat template: the GGUF's tokenizer.chat_template (%d chars)", len(engine.meta.chat_template))
    else:
        log.warning("chat template: the GGUF has none (no tokenizer.chat_template); using ChatML "
                    "(<|im_start|>role ... <|im_end|>); give the model's own with --chat-template FILE")
        if engine.template_stops:
            log.warning("chat template: %s is not an end-of-generation token of this model's vocabulary; "
                        "chat requests stop at it as a stop string", ", ".join(engine.template_stops))


async def serve(config: EngineConfig, *, host: str | Sequence[str] = "127.0.0.1", port: int = 8080,
                settings: ServerSettings | None = None, more_models: Sequence[EngineConfig] = (),
                max_loaded: int = 0, keep_alive: float = -1.0, preload: Sequence[str] = ()) -> int:
    """Serve until SIGINT/SIGTERM on every address of ``host`` (one, or several: IPv4 and IPv6 alike).

    ``config`` is the (default) model, loaded at start; ``more_models`` are more models, loaded on their
    first request (a :class:`~skippy.actors.pool.ModelPool`: the request's ``model`` picks one; ``preload``:
    the ids of those loaded at start instead, after the default model; at most ``max_loaded`` resident, 0:
    no bound; unloaded after ``keep_alive`` idle seconds, negative: never). Returns the exit code: 1 if it
    cannot open the Responses store (``settings.responses_store``), listen (or read the TLS key and
    certificate) or, with one model, the engine fails to start (with several, a model that fails to load
    answers 503 and the others go on).
    """
    settings = settings or ServerSettings()
    state = AppState()
    store = open_response_store(settings)
    if store is None:
        return 1
    app = create_app(state, settings, store)
    shared_state: Shared = app.extensions[EXTENSION]

    def store_error(op: str) -> None:
        metrics = shared_state.metrics()
        if metrics is not None:
            metrics.http.store_errors.labels(op).inc()

    store.on_error = store_error
    try:
        return await _serve(app, state, settings, config, host=host, port=port, more_models=more_models,
                            max_loaded=max_loaded, keep_alive=keep_alive, preload=preload)
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


def open_response_store(settings: ServerSettings) -> StoreClient | None:
    """The store ``--responses-store`` names (default ``sqlite:$SKIPPY_HOME/responses.db``), or ``None``
    after logging why it cannot be used (a start-up error: the server does not start)."""
    from skippy.models.cache import skippy_home
    url = settings.responses_store or f"sqlite:{skippy_home() / 'responses.db'}"
    try:
        store = open_store(url, max_size=settings.responses_store_size, ttl=settings.responses_ttl)
    except (StoreError, ValueError) as exc:
        log.error("--responses-store: %s", exc)
        return None
    log.info("responses store: %s (at most %d, kept %g s)", store.url, store.max_size, store.ttl)
    return StoreClient(store)


async def _serve(app: QuartTrio, state: AppState, settings: ServerSettings, config: EngineConfig, *,
                 host: str | Sequence[str], port: int, more_models: Sequence[EngineConfig], max_loaded: int,
                 keep_alive: float, preload: Sequence[str]) -> int:
    """:func:`serve` once the app and its Responses store are made."""
    hconfig = hypercorn_config(host, port, shutdown_grace=settings.shutdown_grace,
                               ssl_cert_file=settings.ssl_cert_file, ssl_key_file=settings.ssl_key_file)
    where = ", ".join(hconfig.bind)
    if hconfig.ssl_enabled:
        try:
            hconfig.create_ssl_context()  # a missing or mismatched key or certificate fails now, not per connection
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            log.error("cannot use the TLS key %s and certificate %s: %s", settings.ssl_key_file,
                      settings.ssl_cert_file, exc)
            return 1
    try:
        sockets = hconfig.create_sockets()
        for sock in [*sockets.secure_sockets, *sockets.insecure_sockets]:
            sock.listen(hconfig.backlog)
    except OSError as exc:  # the port is taken, the host does not resolve or is not ours
        log.error("cannot listen on %s: %s", where, exc)
        return 1
    stop, drained = trio.Event(), trio.Event()
    exit_code = 0
    pool = ModelPool(pool_models([config, *more_models]), max_loaded=max_loaded,
                     keep_alive=keep_alive, on_load=_log_chat_template)
    state.pool = pool

    async def load_engine(cancel_scope: trio.CancelScope) -> None:
        nonlocal exit_code
        async with trio.open_nursery() as nursery:
            await nursery.start(pool.run)
            await pool.ready.wait()
            if pool.engine(pool.default) is None and pool.single:
                log.error("could not start the engine: %s", pool.error(pool.default))
                state.load_error = f"the engine failed to start: {pool.error(pool.default)}"
                exit_code = 1
                cancel_scope.cancel()
                return
            _freeze_heap()
            if not pool.single:
                log.info("serving %d models: %s (--max-loaded %s, --keep-alive %s)", len(pool.ids()),
                         ", ".join(pool.ids()), max_loaded or "unbounded",
                         f"{keep_alive:g} s" if keep_alive >= 0 else "never")
            for url in listen_urls(sockets):
                log.info("Running on %s (CTRL + C to quit)", url)
            for name in preload:  # --models-preset's load-on-startup, one after the other
                if name != pool.default:
                    try:
                        _, lease = await pool.acquire(name)
                        lease.release()
                    except EngineError as exc:
                        log.error("model %s (load-on-startup): %s", name, exc.message)

    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_signals, stop, state.lifecycle)

        async def shutdown_trigger() -> None:
            await stop.wait()
            nursery.start_soon(_shut_down, state.lifecycle, sockets, settings.shutdown_grace, drained)

        nursery.start_soon(load_engine, nursery.cancel_scope)
        # hypercorn's worker loop on our sockets (we close them on shutdown)
        await _worker_serve(wrap_app(app, hconfig.wsgi_max_body_size, "asgi"), hconfig, sockets,
                            shutdown_trigger, drained, app.extensions[EXTENSION].metrics)
        nursery.cancel_scope.cancel()
    return exit_code

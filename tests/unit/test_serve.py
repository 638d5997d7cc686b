"""serve.py: a connect burst is accepted in one scheduler pass, in arrival order; the start-up heap is frozen; the
hypercorn code it copies or overrides is the one checked."""

from __future__ import annotations

import socket

import trio

from skippy.http.serve import BurstListener

N = 40


def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


async def test_a_burst_is_accepted_without_a_scheduler_pass_per_connection():
    sock = _listening_socket()
    port = sock.getsockname()[1]
    listener = BurstListener(sock)
    clients = []
    for i in range(N):  # N connections wait in the kernel's accept queue, each has sent its index
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(bytes([i]))
        clients.append(c)
    passes = 0

    async def count_passes():
        nonlocal passes
        while True:
            passes += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(count_passes)
        await trio.lowlevel.checkpoint()  # let the counter start
        start = passes
        streams = [await listener.accept() for _ in range(N)]
        accept_passes = passes - start
        nursery.cancel_scope.cancel()
    order = [(await s.receive_some(1))[0] for s in streams]
    assert order == list(range(N))  # arrival order
    # trio.SocketListener takes one connection per pass (N passes); the drain takes one or two
    assert accept_passes <= 2, accept_passes
    for s in streams:
        await s.aclose()
    await listener.aclose()
    for c in clients:
        c.close()


async def test_aclose_closes_connections_drained_but_not_handed_out():
    sock = _listening_socket()
    port = sock.getsockname()[1]
    listener = BurstListener(sock)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    first = await listener.accept()  # drains the other two
    await listener.aclose()
    for c in clients[1:]:
        c.settimeout(5)
        assert c.recv(1) == b""  # the server side was closed
    await first.aclose()
    for c in clients:
        c.close()


def test_freeze_heap_moves_the_start_up_heap_out_of_collections():
    import gc

    from skippy.http.serve import _freeze_heap

    gc.unfreeze()
    try:
        _freeze_heap()
        assert gc.get_freeze_count() > 1000  # modules, classes, the app: never walked by a collection again
        assert gc.get_count()[0] < 50  # and the young generation starts empty
    finally:
        gc.unfreeze()


# sha256 of inspect.getsource(hypercorn.trio.run.worker_serve) for each hypercorn release whose
# worker_serve skippy.http.serve._worker_serve was checked against (0.17.3 and 0.18.0 differ only
# in type annotations).
_CHECKED_WORKER_SERVE = {
    "22efe0285dc01572d27169c7c559b48e2404dfb33f602371ce57e2bf7cfcb682": "0.17.3",
    "8dc8347a9fc357ca334f8c3e4bcf0368176510a96d434f21a5eb4c9ec4103726": "0.18.0",
}


def test_hypercorn_worker_serve_is_the_one_our_copy_follows():
    """skippy/http/serve.py copies hypercorn's trio worker loop; a hypercorn upgrade that changes it fails here."""
    import hashlib
    import inspect
    from importlib.metadata import version

    from hypercorn.trio.run import worker_serve

    digest = hashlib.sha256(inspect.getsource(worker_serve).encode()).hexdigest()
    assert digest in _CHECKED_WORKER_SERVE, (
        f"hypercorn {version('hypercorn')} changed hypercorn.trio.run.worker_serve (sha256 {digest}): "
        "re-check its copy skippy.http.serve._worker_serve (and the list of what the copy drops in "
        "its docstring) against the new source, port what matters, then add this digest to "
        "_CHECKED_WORKER_SERVE in tests/unit/test_serve.py"
    )


# sha256 of the sources of the hypercorn code skippy.http.serve._H11Protocol and _TCPServer.protocol rely on
# (TCPServer.run makes the ProtocolWrapper, whose __init__ makes the H11Protocol that ours replaces; H11Protocol's
# __init__, _handle_events, _send_error_response and _create_stream) for each hypercorn release checked (0.17.3 and
# 0.18.0 differ in type annotations, and in TCPServer.run's copy of the state and bytes of the data).
_CHECKED_H11_PROTOCOL = {
    "2cfc168b55d593dd0d52f922fb07f7987c60814ca67c891cf10b97a7444bf6cf": "0.17.3",
    "2b130967f19938bfbb6b8abb60376b3223c68a3267240300b9673b05e8556b11": "0.18.0",
}


def test_hypercorn_h11_protocol_is_the_one_our_subclass_follows():
    """skippy/http/serve.py replaces hypercorn's HTTP/1.1 protocol by a subclass that answers what breaks HTTP/1.1
    (and serves WebSocket handshakes as plain GETs); a hypercorn upgrade that changes what it overrides fails here."""
    import hashlib
    import inspect
    from importlib.metadata import version

    from hypercorn.protocol import ProtocolWrapper
    from hypercorn.protocol.h11 import H11Protocol
    from hypercorn.trio.tcp_server import TCPServer

    parts = [TCPServer.run, ProtocolWrapper.__init__, H11Protocol.__init__, H11Protocol._handle_events,
             H11Protocol._send_error_response, H11Protocol._create_stream]
    digest = hashlib.sha256("".join(inspect.getsource(f) for f in parts).encode()).hexdigest()
    assert digest in _CHECKED_H11_PROTOCOL, (
        f"hypercorn {version('hypercorn')} changed the HTTP/1.1 protocol code that skippy.http.serve._H11Protocol "
        f"overrides (sha256 {digest}): re-check _H11Protocol and _TCPServer.protocol against the new source, then "
        "add this digest to _CHECKED_H11_PROTOCOL in tests/unit/test_serve.py"
    )


def test_what_breaks_http_1_1_is_described_for_its_answer_and_log_line() -> None:
    from skippy.http.serve import protocol_error, request_line

    assert protocol_error(400, "illegal request line: bytearray(b'GARBAGE')", head_limit=16384) == (
        "malformed HTTP request: illegal request line: 'GARBAGE'", "invalid_request_error", "bad_request")
    message, type_, code = protocol_error(431, "Receive buffer too long", head_limit=16384)
    assert "16384 bytes" in message and (type_, code) == ("invalid_request_error", "request_header_fields_too_large")
    assert protocol_error(501, "Only Transfer-Encoding: chunked is supported", head_limit=1)[1:] == (
        "not_supported_error", "not_implemented")
    assert request_line(b"GET /health HTTP/1.1\r\nHost: x") == "GET /health"
    assert request_line(b"GARBAGE\r\n\r\n") == "GARBAGE"
    assert request_line(b"\x16\x03\x01\x00\xa5") == "\x16\x03\x01\x00\\xa5"  # the log escapes the control bytes
    assert request_line(b"") == "-"


def test_the_start_up_log_names_the_chat_template_and_warns_on_the_chatml_fallback(caplog) -> None:
    import logging
    from types import SimpleNamespace

    from skippy.http.serve import _log_chat_template

    def engine(flag: str | None, gguf: str | None, stops: tuple[str, ...] = ()) -> SimpleNamespace:
        return SimpleNamespace(config=SimpleNamespace(chat_template=flag), meta=SimpleNamespace(chat_template=gguf),
                               template_stops=stops)

    caplog.set_level(logging.INFO, logger="skippy.serve")
    _log_chat_template(engine("{{ x }}", "{{ gguf }}"))
    _log_chat_template(engine(None, "{{ gguf }}"))
    _log_chat_template(engine(None, None))
    _log_chat_template(engine(None, None, ("<|im_end|>",)))  # ChatML on a vocabulary without its tokens (Gemma)
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "skippy.serve"]
    assert records[0] == ("INFO", "chat template: from --chat-template (7 chars)")
    assert records[1] == ("INFO", "chat template: the GGUF's tokenizer.chat_template (10 chars)")
    assert records[2][0] == "WARNING" and "the GGUF has none" in records[2][1] and "ChatML" in records[2][1]
    assert len(records) == 5  # the stop-string warning only where template_stops is set
    assert records[4] == ("WARNING", "chat template: <|im_end|> is not an end-of-generation token of this "
                                     "model's vocabulary; chat requests stop at it as a stop string")


def test_hypercorn_config_binds_every_address_and_enables_tls_with_both_files() -> None:
    from skippy.http.serve import hypercorn_config

    cfg = hypercorn_config(("127.0.0.1", "::1"), 8080)
    assert cfg.bind == ["127.0.0.1:8080", "[::1]:8080"] and not cfg.ssl_enabled
    assert hypercorn_config("0.0.0.0", 1).bind == ["0.0.0.0:1"]
    tls = hypercorn_config("127.0.0.1", 8443, ssl_cert_file="c.pem", ssl_key_file="k.pem")
    assert tls.ssl_enabled and (tls.certfile, tls.keyfile) == ("c.pem", "k.pem")

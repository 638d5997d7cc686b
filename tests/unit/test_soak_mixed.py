"""bench/soak_mixed.py's accounting: a 5xx, a transport error or an accepted bad input fails the soak; the
table adds up. Against a fake HTTP server (the standard library's) that answers every request with a 500."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.soak_mixed import Sample, Tally, main


def test_samples_fail_on_5xx_errors_and_accepted_bad_inputs() -> None:
    assert not Sample("chat", 200, 0.1, 0).failed and not Sample("chat", 429, 0.1, 0).failed
    assert Sample("chat", 500, 0.1, 0).failed and Sample("chat", 503, 0.1, 0).failed
    assert Sample("chat", "error", 0.1, 0).failed and not Sample("chat", "disconnect", 0.1, 0).failed
    assert Sample("bad input", 200, 0.1, 0, expect_4xx=True).failed
    assert not Sample("bad input", 400, 0.1, 0, expect_4xx=True).failed


def test_tally_windows_and_table() -> None:
    tally = Tally(duration=100)
    for at, ms in ((1, 10), (2, 30), (60, 500), (95, 100), (99, 300)):
        tally.add(Sample("chat", 200, ms / 1000, at))
    tally.add(Sample("chat", 500, 0.2, 98), error="boom")
    (row,) = tally.rows()
    assert tally.window == 50 and row["n"] == 6 and row["statuses"] == "200: 5, 500: 1" and row["failed"] == 1
    assert row["first_p99"] == 30 and row["last_p99"] == 500 and row["last_p50"] == 300
    assert "| chat | 6 |" in tally.table() and tally.errors == ["chat: boom"] and len(tally.failures) == 1


class _Failing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"process_resident_memory_bytes 1048576\nprocess_open_fds 12\n"
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b'{"error": {"message": "broken", "type": "server_error"}}'
        self.send_response(500)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def failing_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_server_that_answers_500_fails_the_soak(failing_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base-url", failing_server, "--duration", "1", "--concurrency", "2"]) == 1
    out = capsys.readouterr().out
    assert "500: " in out
    # RSS start -> warm (the end of the first window) -> end, the prompt cache likewise, the RSS outside it
    assert "first failures:" in out and "broken" in out and "| 1 -> 1 -> 1 | 0 -> 0 -> 0 | 1 -> 1 | 12 -> 12 |" in out

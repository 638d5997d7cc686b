"""``skippy rpc-worker``: this machine's devices served to ``skippy serve --rpc`` (llama.cpp's RPC server).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from skippy.cli.common import main


@main.command(name="rpc-worker")
@click.option("--host", "-H", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="Address to listen on. llama.cpp's RPC protocol has no authentication or encryption: keep "
                   "the loopback default, or bind an address of a trusted network only.")
@click.option("--port", "-p", default=50052, show_default=True, type=click.IntRange(1, 65535),
              help="TCP port to listen on (llama.cpp rpc-server's default).")
@click.option("--threads", "-t", default=None, type=click.IntRange(1), help="CPU threads  [default: all cores]")
@click.option("--device", "-d", default=None, metavar="DEV1,DEV2",
              help="Devices to serve, by llama.cpp name  [default: every GPU, else the CPU]")
@click.option("--cache", is_flag=True, default=False,
              help="Keep received tensors in a local file cache ($SKIPPY_HOME/rpc-cache; llama.cpp rpc-server's "
                   "-c): a server that loads the same model again sends hashes instead of the weights.")
def rpc_worker(host: str, port: int, threads: int | None, device: str | None, cache: bool) -> None:
    """Serve this machine's CPU (or GPU) to 'skippy serve --rpc HOST:PORT' (llama.cpp's RPC server).

    It runs llama.cpp's ggml_backend_rpc_start_server, as llama.cpp's rpc-server program does,
    until it is stopped (SIGINT/SIGTERM). One server uses a worker at a time. The worker must
    come from the same llama.cpp as the server (the protocol version is checked at start-up).
    """
    import signal

    from skippy.engine.runtime.backends import parse_devices, parse_endpoint, serve_rpc_worker
    from skippy.models import skippy_home

    try:
        parse_endpoint(f"{host}:{port}")
        devices = parse_devices(device)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if host not in ("127.0.0.1", "localhost"):
        click.echo(f"warning: listening on {host}: llama.cpp's RPC protocol has no authentication; anyone who "
                   "reaches this port can run code on this machine's devices. Use a trusted network only.", err=True)
    cache_dir = None
    if cache:
        cache_dir = str(skippy_home() / "rpc-cache")
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server loop is in C: let Ctrl-C end the process
    try:
        serve_rpc_worker(host, port, threads=threads, device_names=devices, cache_dir=cache_dir)
    except (RuntimeError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)

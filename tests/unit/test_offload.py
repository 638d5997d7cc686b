"""GPU offload and RPC settings against the real llama.cpp build (its ggml backend registry), no server.

The build here is a CPU one (no GPU backend), with llama.cpp's RPC backend when built by
``make venv``. Offload settings that need a GPU are checked by name and by the registry: a GPU
device asked for on this build is a clear error before any model loads. The RPC client checks
(``rpc_hello``) run against small loopback sockets that play a dead, a silent and a foreign
worker: llama.cpp itself would abort the process on each (``GGML_ABORT``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from skippy.engine.config import EngineConfig
from skippy.engine.runtime import backends as be

MODEL = os.path.expanduser("~/.cache/skippy/models/SmolLM2-135M-Instruct.Q4_1.gguf")


# -- parsing (the settings' validators) ---------------------------------------------------------------------

def test_settings_parse_like_llama_server() -> None:
    assert be.parse_rpc("127.0.0.1:50052, worker:50053,127.0.0.1:50052") == ("127.0.0.1:50052", "worker:50053")
    assert be.parse_devices("CUDA0,Vulkan1") == ("CUDA0", "Vulkan1") and be.parse_devices("none") == ("none",)
    assert be.parse_tensor_split("3,1") == (3.0, 1.0) and be.parse_tensor_split("1/2/0") == (1.0, 2.0, 0.0)
    config = EngineConfig(model="m", tensor_split=[3, 1], device="CUDA0", rpc=["h:1", "h:2"])
    assert (config.tensor_split, config.device, config.rpc) == ((3.0, 1.0), ("CUDA0",), ("h:1", "h:2"))
    assert EngineConfig(model="m").rpc == ()


@pytest.mark.parametrize("field,value,message", [
    ("rpc", "localhost", "is not HOST:PORT"),
    ("rpc", "::1:50052", "is not HOST:PORT"),  # llama.cpp splits at the first ':'
    ("rpc", "h:0", "port 1-65535"),
    ("device", "none,CUDA0", "goes alone"),
    ("tensor_split", "1,nan", "finite and >= 0"),
    ("tensor_split", ",".join(["1"] * 17), "at most 16"),
    ("tensor_split", "0", "at least one proportion"),
    ("split_mode", "tensor", "'none', 'layer', 'row'"),
    ("n_gpu_layers", -2, "x>=-1"),
])
def test_a_bad_setting_is_refused_at_construction(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        EngineConfig(model="m", **{field: value})
    assert field in str(err.value)


# -- the registry of this build -----------------------------------------------------------------------------

def test_the_registry_lists_the_cpu_and_the_built_backends() -> None:
    built = be.backends()
    assert "CPU" in built
    cpu = [d for d in be.devices() if d.type == "cpu"]
    assert cpu and cpu[0].memory_total > 0 and cpu[0].backend == "CPU"
    assert ("RPC" in built) == (be.backend_library("rpc") is not None)


def test_the_build_has_the_rpc_backend() -> None:
    """``make venv`` builds llama.cpp with GGML_RPC; CI builds the venv from scratch, so there it must be."""
    if be.backend_library("rpc") is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"llama-cpp-python was built without the RPC backend ({be.llama_cpp_lib_dir()})")
        pytest.skip("this venv's llama-cpp-python was built without GGML_RPC (make venv builds it)")
    assert "RPC" in be.backends()


def test_a_gpu_device_on_a_build_without_one_is_a_clear_error() -> None:
    if any(d.type in ("gpu", "igpu") and d.backend != "RPC" for d in be.devices()):
        pytest.skip("this machine has a GPU backend")
    with pytest.raises(ValueError) as err:
        be.plan_offload(device_names=("CUDA0",))
    assert "device 'CUDA0': no such device" in str(err.value)
    assert re.search(r"the backends [A-Za-z, ]*CPU", str(err.value)) and "rebuild with GPU=cuda" in str(err.value)
    with pytest.raises(ValueError, match="the CPU is no offload device"):
        be.plan_offload(device_names=("CPU",))


def test_without_a_device_offload_settings_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    if be.offload_devices(be.devices()):
        pytest.skip("this machine has an offload device")
    plan = be.plan_offload()
    assert plan.devices == () and not plan.explicit and plan.n_gpu_layers == -1
    assert plan.as_dict(30)["n_gpu_layers"] == 0 and plan.as_dict(30)["n_layer"] == 31
    with caplog.at_level(logging.WARNING, logger="skippy.runtime"):
        plan = be.plan_offload(n_gpu_layers=99, main_gpu=1, tensor_split=(3, 1))
    assert plan.layers_offloaded(30) == 0
    assert "n_gpu_layers, tensor_split, main_gpu ignored, as llama-server does" in caplog.text
    assert be.plan_offload(device_names=("none",)).explicit  # llama-server's --device none: a NULL-only list


def test_llama_cpps_default_device_order_puts_rpc_first() -> None:
    def dev(name: str, type_: str, backend: str) -> be.Device:
        return be.Device(name=name, description="", type=type_, backend=backend, memory_free=0, memory_total=0)

    cpu, cuda, igpu, rpc = (dev("CPU", "cpu", "CPU"), dev("CUDA0", "gpu", "CUDA"), dev("iGPU0", "igpu", "Vulkan"),
                            dev("RPC0", "gpu", "RPC"))
    assert be.offload_devices([cpu, cuda, igpu, rpc]) == [rpc, cuda]
    assert be.offload_devices([cpu, igpu]) == [igpu] and be.offload_devices([cpu]) == []


# -- an RPC worker that is not there, silent, or something else ---------------------------------------------

@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    try:
        yield sock, f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_dead_worker_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused
        with pytest.raises(ConnectionError, match=f"cannot reach RPC worker {endpoint}"):
            be.rpc_hello(endpoint, timeout=2)


def test_a_silent_worker_times_out(listener: tuple[socket.socket, str]) -> None:
    _, endpoint = listener  # the kernel accepts, nobody answers (a worker busy with another client does this)
    with pytest.raises(ConnectionError, match="did not answer within 0.5 s"):
        be.rpc_hello(endpoint, timeout=0.5)


@pytest.mark.parametrize("reply,message", [
    ((5).to_bytes(8, "little") + b"hello", "not a llama.cpp RPC server"),
    ((28).to_bytes(8, "little") + bytes([3, 0, 0, 0]) + bytes(24), "speaks protocol 3.0.0"),
    ((28).to_bytes(8, "little") + bytes([be.RPC_PROTO_MAJOR_VERSION, 0, 1, 0]) + bytes(24), None),
])
def test_the_hello_exchange_checks_the_protocol(listener: tuple[socket.socket, str], reply: bytes,
                                                message: str | None) -> None:
    sock, endpoint = listener
    got = []

    def answer() -> None:
        conn, _ = sock.accept()
        with conn:
            got.append(conn.recv(64))
            conn.sendall(reply)

    t = threading.Thread(target=answer)
    t.start()
    try:
        if message is None:
            assert be.rpc_hello(endpoint, timeout=5) == (be.RPC_PROTO_MAJOR_VERSION, 0, 1)
        else:
            with pytest.raises(ConnectionError, match=message):
                be.rpc_hello(endpoint, timeout=5)
    finally:
        t.join()
    assert got[0] == bytes([14]) + (24).to_bytes(8, "little") + bytes(24)  # RPC_CMD_HELLO, size, conn_caps


def test_adding_a_dead_worker_never_reaches_llama_cpp() -> None:
    """llama.cpp's ggml_backend_rpc_add_server aborts the process on a dead endpoint: it must not be called."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
        if "RPC" not in be.backends():
            with pytest.raises(RuntimeError, match="built without the RPC backend"):
                be.plan_offload(rpc=(endpoint,))
        else:
            with pytest.raises(ConnectionError, match=f"cannot reach RPC worker {endpoint}"):
                be.plan_offload(rpc=(endpoint,))


# -- the runtime ----------------------------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(MODEL), reason="default model not downloaded (skippy pull)")
def test_the_runtime_reports_backends_devices_and_offload() -> None:
    from skippy.engine.runtime.llama import LlamaRuntime

    if not any(d.type in ("gpu", "igpu") and d.backend != "RPC" for d in be.devices()):
        with pytest.raises(ValueError, match="device 'Vulkan0': no such device"):
            LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, devices=("Vulkan0",))
    rt = LlamaRuntime(MODEL, n_ctx_seq=256, n_seq_max=1, n_gpu_layers=0, devices=("none",))
    try:
        info = rt.meta.devices
        assert info is not None and "CPU" in info["backends"]
        assert any(d["type"] == "cpu" for d in info["devices"])
        assert info["offload"] == {"devices": [], "n_gpu_layers": 0, "n_layer": 31, "split_mode": "layer",
                                   "main_gpu": 0, "tensor_split": [], "rpc": []}
        assert rt.device_problem() is None
    finally:
        rt.close()

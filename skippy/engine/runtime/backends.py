"""llama.cpp's backends and devices: GPU offload settings, RPC workers, and what the build holds.

llama.cpp (ggml) keeps a registry of *backends* (``CPU``, ``CUDA``, ``Vulkan``, ``Metal``,
``RPC``...; one per library built in) and their *devices* (``CPU``, ``CUDA0``, ``RPC0``...).
This module reads that registry through ctypes on llama-cpp-python's ``libggml``
(``ggml_backend_reg_*`` / ``ggml_backend_dev_*``, ggml-backend.h), picks the devices a model is
offloaded to the way llama-server does (``--device``, ``--rpc``, ``--split-mode``,
``--main-gpu``), and speaks the first message of llama.cpp's RPC protocol (``HELLO``,
ggml-rpc.cpp) to check a worker before llama.cpp connects to it: llama.cpp aborts the whole
process (``GGML_ABORT("Failed to connect to ...")``) when a worker it connects to is down.

Run as ``python -m skippy.engine.runtime.backends rpc [cuda|vulkan|metal] [noamx]`` it checks that the
installed llama-cpp-python holds those backends' libraries (``make venv`` runs it after each
install) and exits 1 naming the missing ones; ``noamx`` also requires a CPU backend built without
llama.cpp's AMX kernels (see :func:`cpu_has_amx`).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import socket
import struct
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

_LIB_STEMS = {"rpc": "ggml-rpc", "cuda": "ggml-cuda", "vulkan": "ggml-vulkan", "metal": "ggml-metal"}

#: ggml_backend_dev_type (ggml-backend.h) -> the name /props reports
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
_CPU, _GPU, _IGPU = 0, 1, 2

#: llama_split_mode (llama.h), by llama-server's ``--split-mode`` names; ``tensor`` (experimental) is left out
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}

#: llama.cpp's RPC protocol, ggml-rpc.h / ggml-rpc.cpp of the pinned llama.cpp: RPC_CMD_HELLO = 14 (fixed
#: forever), rpc_msg_hello_req = conn_caps[24], rpc_msg_hello_rsp = major, minor, patch, padding, conn_caps[24]
RPC_PROTO_MAJOR_VERSION = 7
RPC_PROTO_MINOR_VERSION = 0
_RPC_CMD_HELLO = 14
_RPC_CONN_CAPS_SIZE = 24


def llama_cpp_lib_dir() -> Path:
    """The directory holding llama-cpp-python's shared libraries (``llama_cpp/lib``).

    Raises ``RuntimeError`` when llama-cpp-python is not installed.
    """
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llama-cpp-python is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def backend_library(name: str) -> Path | None:
    """The shared library of backend ``name`` (``rpc``, ``cuda``, ``vulkan``, ``metal``) if it was built, else None."""
    stem = _LIB_STEMS[name]
    lib = llama_cpp_lib_dir()
    for candidate in (f"lib{stem}.so", f"lib{stem}.dylib", f"{stem}.dll"):
        if (lib / candidate).exists():
            return lib / candidate
    return None


# -- the ggml backend registry (ctypes) --------------------------------------------------------------------

_lock = threading.Lock()
_ggml: ctypes.CDLL | None = None


class _DevProps(ctypes.Structure):
    """ggml-backend.h ``struct ggml_backend_dev_props`` (its caps: four bools)."""

    _fields_ = [("name", ctypes.c_char_p), ("description", ctypes.c_char_p), ("memory_free", ctypes.c_size_t),
                ("memory_total", ctypes.c_size_t), ("type", ctypes.c_int), ("device_id", ctypes.c_char_p),
                ("caps", ctypes.c_bool * 4)]


def ggml() -> ctypes.CDLL:
    """llama-cpp-python's ``libggml`` (the backend registry) with the prototypes used here; loads llama.cpp's
    backends first (``llama_backend_init``)."""
    global _ggml
    with _lock:
        if _ggml is None:
            import llama_cpp
            from llama_cpp._ctypes_extensions import load_shared_library

            llama_cpp.llama_backend_init()
            lib = _loaded_ggml(Path(llama_cpp.__file__).parent / "lib", load_shared_library)
            p, sz = ctypes.c_void_p, ctypes.c_size_t
            for fn, args, res in [
                ("ggml_backend_reg_count", [], sz), ("ggml_backend_reg_get", [sz], p),
                ("ggml_backend_reg_by_name", [ctypes.c_char_p], p), ("ggml_backend_reg_name", [p], ctypes.c_char_p),
                ("ggml_backend_reg_dev_count", [p], sz), ("ggml_backend_reg_dev_get", [p, sz], p),
                ("ggml_backend_reg_get_proc_address", [p, ctypes.c_char_p], p),
                ("ggml_backend_register", [p], None),
                ("ggml_backend_dev_count", [], sz), ("ggml_backend_dev_get", [sz], p),
                ("ggml_backend_dev_by_name", [ctypes.c_char_p], p),
                ("ggml_backend_dev_get_props", [p, ctypes.POINTER(_DevProps)], None),
                ("ggml_backend_dev_backend_reg", [p], p),
            ]:
                f = getattr(lib, fn)
                f.argtypes, f.restype = args, res
            _ggml = lib
        return _ggml


def _loaded_ggml(lib_dir: Path, load_shared_library: Any) -> ctypes.CDLL:
    """The ``libggml`` that libllama itself uses, by its soname (``libggml.so.0``, ``libggml.0.dylib``).

    A wheel holds no symlinks: ``libggml.so`` and ``libggml.so.0`` are two copies of one library,
    and loading the first (as ``llama_cpp._ggml`` does) maps a second registry of backends that
    libllama never sees (RPC devices added there are never used).
    """
    for name in ("libggml.so.0", "libggml.0.dylib"):
        if (lib_dir / name).exists():
            return ctypes.CDLL(str(lib_dir / name))
    lib: ctypes.CDLL = load_shared_library("ggml", lib_dir)
    return lib


@attrs.frozen
class Device:
    """One ggml backend device (``ggml_backend_dev_get_props``), as ``/props`` reports it.

    ``name``: llama.cpp's device name (``CPU``, ``CUDA0``, ``Vulkan0``, ``RPC0``...), what ``--device``
    takes. ``description``: the hardware (an RPC device's is its worker's ``host:port``). ``type``:
    ``cpu``, ``gpu``, ``igpu`` or ``accel`` (an RPC device is a ``gpu``). ``backend``: the backend
    (registry) name. ``memory_free`` / ``memory_total``: bytes, read once (an RPC device asks its
    worker, so they are never read again while serving).
    """

    name: str
    description: str
    type: str
    backend: str
    memory_free: int
    memory_total: int
    handle: int = attrs.field(default=0, eq=False, repr=False)  # ggml_backend_dev_t

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "type": self.type, "backend": self.backend,
                "memory_free": self.memory_free, "memory_total": self.memory_total}


def _device(dev: int) -> Device:
    lib = ggml()
    props = _DevProps()
    lib.ggml_backend_dev_get_props(dev, ctypes.byref(props))
    reg = lib.ggml_backend_dev_backend_reg(dev)
    backend = lib.ggml_backend_reg_name(reg).decode() if reg else ""
    return Device(name=(props.name or b"").decode(), description=(props.description or b"").decode(),
                  type=DEVICE_TYPES.get(props.type, str(props.type)), backend=backend,
                  memory_free=int(props.memory_free), memory_total=int(props.memory_total), handle=dev)


def backends() -> list[str]:
    """Names of the backends built into this llama.cpp (``CPU``, ``RPC``, ``CUDA``...), registry order."""
    lib = ggml()
    return [lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode()
            for i in range(lib.ggml_backend_reg_count())]


def devices() -> list[Device]:
    """Every registered device, registry order (RPC devices once their workers are added)."""
    lib = ggml()
    return [_device(lib.ggml_backend_dev_get(i)) for i in range(lib.ggml_backend_dev_count())]


def offload_devices(found: Sequence[Device]) -> list[Device]:
    """The devices llama.cpp offloads to when ``llama_model_params.devices`` is NULL (llama.cpp's
    ``llama_prepare_model_devices``): RPC devices first, then GPUs, then integrated GPUs only
    when there is no GPU; never the CPU or accelerators (llama.cpp also skips a GPU seen twice
    under another backend, which this does not know)."""
    rpc = [d for d in found if d.type == "gpu" and d.backend == "RPC"]
    gpus = [d for d in found if d.type == "gpu" and d.backend != "RPC"]
    igpus = [d for d in found if d.type == "igpu"]
    return rpc + gpus + ([] if gpus else igpus)


# -- settings: parsing and checking ----------------------------------------------------------------------------


def _items(value: str | Iterable[Any]) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value)


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``; ``ValueError`` naming the text otherwise.

    HOST is a name or an IPv4 address: llama.cpp's RPC client splits an endpoint at its first ``:``
    (ggml-rpc.cpp ``parse_endpoint``), so an IPv6 address cannot be given.
    """
    host, sep, port = text.strip().partition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (a host name or IPv4 address, port 1-65535)")
    return host, int(port)


def parse_rpc(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """llama-server's ``--rpc HOST:PORT[,HOST:PORT...]`` (or a sequence of them) -> endpoints, duplicates
    dropped. Raises ``ValueError`` for one that is not ``HOST:PORT``."""
    endpoints = [str(e).strip() for e in _items(value or ())]
    for e in endpoints:
        parse_endpoint(e)
    return tuple(dict.fromkeys(endpoints))


def parse_devices(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """llama-server's ``--device DEV1,DEV2`` (or ``none``: no offload) -> device names. Raises ``ValueError``
    for ``none`` beside other names. Whether the devices exist is checked at load."""
    names = tuple(dict.fromkeys(str(n).strip() for n in _items(value or ()) if str(n).strip()))
    if "none" in names and len(names) > 1:
        raise ValueError(f"'none' (no offload) goes alone, got {','.join(names)!r}")
    return names


#: llama_max_devices() of llama.cpp builds (LLAMA_MAX_DEVICES = 16); the runtime checks the real one
MAX_DEVICES = 16


def parse_tensor_split(value: str | Iterable[float] | None) -> tuple[float, ...]:
    """llama-server's ``--tensor-split 3,1`` (``,`` or ``/`` separated proportions, or a sequence) -> floats.

    Raises ``ValueError`` for a non-number, a negative or non-finite value, all zeros, or more than
    :data:`MAX_DEVICES` values.
    """
    parts: list[str] | list[float]
    if isinstance(value, str):
        parts = [v for v in value.replace("/", ",").split(",") if v.strip()]
    else:
        parts = list(value or ())
    out: list[float] = []
    for p in parts:
        try:
            x = float(p)
        except (TypeError, ValueError):
            raise ValueError(f"{p!r} is not a number (give proportions such as 3,1)") from None
        if not (x >= 0 and x != float("inf")):
            raise ValueError(f"proportions must be finite and >= 0, got {p!r}")
        out.append(x)
    if len(out) > MAX_DEVICES:
        raise ValueError(f"at most {MAX_DEVICES} proportions (llama_max_devices), got {len(out)}")
    if out and not any(out):
        raise ValueError("at least one proportion must be > 0")
    return tuple(out)


# -- the offload plan ----------------------------------------------------------------------------------------


@attrs.frozen
class Offload:
    """Where a model's layers go, decided before ``llama_model_load_from_file`` (:func:`plan_offload`).

    ``devices``: the devices llama.cpp offloads to, in its order (RPC first), after ``--split-mode
    none`` kept only ``main_gpu``; empty: everything stays on the CPU. ``explicit``: ``--device``
    was given, so ``llama_model_params.devices`` lists ``requested`` (else NULL: llama.cpp's own
    choice, which ``devices`` mirrors). ``n_gpu_layers``: the value for ``llama_model_params``
    (-1: all). ``backends`` / ``found``: the registry at load (every backend and device).
    """

    n_gpu_layers: int
    split_mode: str
    main_gpu: int
    tensor_split: tuple[float, ...]
    rpc: tuple[str, ...]
    explicit: bool
    requested: tuple[Device, ...]
    devices: tuple[Device, ...]
    backends: tuple[str, ...]
    found: tuple[Device, ...]

    def layers_offloaded(self, n_layer: int) -> int:
        """Layers llama.cpp puts on the devices out of ``n_layer + 1`` (the repeating layers and the output
        layer; llama.cpp's start-up line ``offloaded X/Y layers to GPU``)."""
        if not self.devices:
            return 0
        return n_layer + 1 if self.n_gpu_layers < 0 else min(self.n_gpu_layers, n_layer + 1)

    def as_dict(self, n_layer: int) -> dict[str, Any]:
        """The ``/props`` ``offload`` object."""
        return {"devices": [d.name for d in self.devices], "n_gpu_layers": self.layers_offloaded(n_layer),
                "n_layer": n_layer + 1, "split_mode": self.split_mode, "main_gpu": self.main_gpu,
                "tensor_split": list(self.tensor_split), "rpc": list(self.rpc)}


def plan_offload(*, n_gpu_layers: int | None = None, split_mode: str = "layer", main_gpu: int = 0,
                 tensor_split: Sequence[float] = (), device_names: Sequence[str] = (),
                 rpc: Sequence[str] = (), rpc_timeout: float = 5.0) -> Offload:
    """Check the offload settings against this llama.cpp build and its devices, as llama-server's
    ``-ngl`` / ``--split-mode`` / ``--main-gpu`` / ``--tensor-split`` / ``--device`` / ``--rpc`` do,
    and add the RPC workers (:func:`add_rpc_servers`).

    ``n_gpu_layers`` None: all layers (llama.cpp's default, -1), which means none without a device.
    Raises ``ValueError`` for a device name this build does not have (e.g. ``CUDA0`` on a CPU
    build; the message lists the backends and devices there are), the CPU named as a device,
    ``main_gpu`` or more ``tensor_split`` proportions than devices, an unknown ``split_mode``;
    ``RuntimeError`` for ``rpc`` on a build without the RPC backend; ``ConnectionError`` for an
    RPC worker that does not answer. Settings that need a device are ignored with a warning when
    there is none (as llama-server does).
    """
    import logging

    log = logging.getLogger("skippy.runtime")
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split_mode must be one of {', '.join(SPLIT_MODES)}, not {split_mode!r}")
    names = parse_devices(device_names)
    endpoints = parse_rpc(rpc)
    split = parse_tensor_split(tensor_split)
    if endpoints:
        add_rpc_servers(endpoints, rpc_timeout)
    found = tuple(devices())
    built = tuple(backends())
    explicit = bool(names)
    if names == ("none",):
        requested: list[Device] = []
    elif names:
        by_name = {d.name: d for d in found}
        requested = []
        for n in names:
            dev = by_name.get(n)
            if dev is None or dev.type in ("cpu", "accel"):
                offloadable = [d.name for d in found if d.type not in ("cpu", "accel")]
                why = "the CPU is no offload device (layers that are not offloaded stay on it)" if dev is not None \
                    else "no such device"
                raise ValueError(f"device {n!r}: {why}; this llama.cpp build has the backends {', '.join(built)} "
                                 f"and the offload devices {', '.join(offloadable) or 'none'}"
                                 + ("" if offloadable else " (a CPU build: rebuild with GPU=cuda, vulkan or metal, "
                                                           "or give --rpc workers)"))
            requested.append(dev)
    else:
        requested = offload_devices(found)
    used = list(requested)
    if used and main_gpu >= len(used):
        raise ValueError(f"main_gpu {main_gpu}: there are only {len(used)} offload devices "
                         f"({', '.join(d.name for d in used)})")
    if split_mode == "none" and used:
        used = [used[main_gpu]]
    if used and len(split) > len(used):
        raise ValueError(f"tensor_split has {len(split)} proportions for {len(used)} devices "
                         f"({', '.join(d.name for d in used)})")
    if not used:
        ignored = [what for what, on in (("n_gpu_layers", n_gpu_layers not in (None, 0)), ("tensor_split", split),
                                          ("main_gpu", main_gpu)) if on]
        if ignored:
            log.warning("no GPU or RPC device to offload to (backends: %s): %s ignored, as llama-server does",
                        ", ".join(built), ", ".join(ignored))
    return Offload(n_gpu_layers=-1 if n_gpu_layers is None else n_gpu_layers, split_mode=split_mode,
                   main_gpu=main_gpu, tensor_split=split, rpc=endpoints, explicit=explicit,
                   requested=tuple(requested), devices=tuple(used), backends=built, found=found)


# -- RPC workers ---------------------------------------------------------------------------------------------


def rpc_hello(endpoint: str, timeout: float = 5.0) -> tuple[int, int, int]:
    """Connect to llama.cpp RPC server ``endpoint`` and do its ``HELLO`` exchange (ggml-rpc.cpp's
    ``negotiate_hello``); return its protocol version ``(major, minor, patch)``.

    Raises ``ConnectionError`` with a message naming the endpoint when it does not answer within
    ``timeout`` seconds (refused, unreachable, or busy: llama.cpp's RPC server serves one client
    at a time), answers something else, or speaks another protocol version than this llama.cpp
    (:data:`RPC_PROTO_MAJOR_VERSION`; llama.cpp would abort the process on any of these).
    """
    host, port = parse_endpoint(endpoint)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<BQ", _RPC_CMD_HELLO, _RPC_CONN_CAPS_SIZE) + bytes(_RPC_CONN_CAPS_SIZE))
            head = _recv(sock, 8)
            (size,) = struct.unpack("<Q", head)
            if size != 4 + _RPC_CONN_CAPS_SIZE:
                raise ConnectionError(f"RPC worker {endpoint} answered HELLO with {size} bytes, not "
                                      f"{4 + _RPC_CONN_CAPS_SIZE}: not a llama.cpp RPC server of this protocol")
            major, minor, patch = _recv(sock, size)[:3]
    except TimeoutError:
        raise ConnectionError(f"RPC worker {endpoint} did not answer within {timeout:g} s (is it serving another "
                              "client? llama.cpp's RPC server takes one at a time)") from None
    except OSError as exc:
        raise ConnectionError(f"cannot reach RPC worker {endpoint}: {exc.strerror or exc}") from None
    if major != RPC_PROTO_MAJOR_VERSION or minor > RPC_PROTO_MINOR_VERSION:
        raise ConnectionError(f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}; this llama.cpp "
                              f"speaks {RPC_PROTO_MAJOR_VERSION}.{RPC_PROTO_MINOR_VERSION}.x (build both from "
                              "the same llama.cpp)")
    return major, minor, patch


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the RPC worker at {sock.getpeername()} closed the connection during HELLO")
        data += chunk
    return data


def add_rpc_servers(endpoints: Sequence[str], timeout: float = 5.0) -> list[Device]:
    """Add llama.cpp RPC workers as devices, as llama-server's ``--rpc`` does (common/arg.cpp
    ``add_rpc_devices``: ``ggml_backend_rpc_add_server`` from the RPC backend, then
    ``ggml_backend_register``), after checking each with :func:`rpc_hello`; return their devices.

    The devices stay registered for the process (llama.cpp has no way to remove them), so a model
    loaded later with the default device list also offloads to them. Raises ``RuntimeError`` when
    this llama.cpp was built without the RPC backend, ``ConnectionError`` for a worker that does
    not answer (:func:`rpc_hello`).
    """
    lib = ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RuntimeError(f"this llama.cpp was built without the RPC backend (backends: {', '.join(backends())}); "
                           "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_RPC=ON (make venv does)")
    add = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not add:
        raise RuntimeError("the RPC backend has no ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(add)
    found: list[Device] = []
    for endpoint in endpoints:
        rpc_hello(endpoint, timeout)
        server_reg = add_server(endpoint.encode())
        if not server_reg:
            raise ConnectionError(f"RPC worker {endpoint} has no device")
        known = {d.handle for d in devices()}
        new = [lib.ggml_backend_reg_dev_get(server_reg, i) for i in range(lib.ggml_backend_reg_dev_count(server_reg))]
        if not all(d in known for d in new):
            lib.ggml_backend_register(server_reg)
        found += [_device(d) for d in new]
    return found


def rpc_connections_alive(endpoints: Sequence[str]) -> dict[str, bool]:
    """For each RPC endpoint, whether this process still holds an open TCP connection to it (llama.cpp's
    RPC client keeps one per worker while a model uses it).

    A worker that exits (or is killed) closes its side, so our socket leaves ``ESTABLISHED``
    (``CLOSE_WAIT``): the answer is then ``False`` without a byte sent (sending would make
    llama.cpp abort). A worker whose machine vanishes without closing the connection looks alive
    until TCP gives up. Uses psutil's per-process connection table.
    """
    import psutil

    addrs: dict[str, set[tuple[str, int]]] = {}
    for e in endpoints:
        host, port = parse_endpoint(e)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            infos = []
        addrs[e] = {(_plain(str(info[4][0])), port) for info in infos}  # an IPv4 or IPv6 address: a str
    live = {(_plain(c.raddr.ip), c.raddr.port) for c in psutil.Process(os.getpid()).net_connections(kind="tcp")
            if c.raddr and c.status == psutil.CONN_ESTABLISHED}
    return {e: bool(a & live) for e, a in addrs.items()}


def _plain(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") else ip


def serve_rpc_worker(host: str, port: int, *, threads: int | None = None, device_names: Sequence[str] = (),
                     cache_dir: str | None = None) -> None:
    """Serve this machine's devices to llama.cpp RPC clients until the process ends (llama.cpp's
    ``ggml_backend_rpc_start_server``, what its ``rpc-server`` program runs; it never returns unless
    it fails to start).

    ``device_names``: the devices to expose (``--device``); default as ``rpc-server``: every GPU /
    iGPU device, else the CPU. ``threads``: CPU threads (default: all cores). ``cache_dir``:
    llama.cpp's local tensor cache (``rpc-server -c``), or None. Raises ``RuntimeError`` when the RPC
    backend is missing, a device is unknown, or the server cannot start (the port is taken).
    """
    lib = ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RuntimeError(f"this llama.cpp was built without the RPC backend (backends: {', '.join(backends())}); "
                           "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_RPC=ON (make venv does)")
    found = devices()
    if device_names:
        by_name = {d.name: d for d in found}
        unknown = [n for n in device_names if n not in by_name]
        if unknown:
            raise RuntimeError(f"unknown device {', '.join(unknown)}; this machine has: "
                               f"{', '.join(d.name for d in found)}")
        chosen = [by_name[n] for n in device_names]
    else:
        chosen = [d for d in found if d.type in ("gpu", "igpu") and d.backend != "RPC"] or \
                 [d for d in found if d.type == "cpu"]
    start = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_start_server")
    start_server = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_void_p))(start)
    arr = (ctypes.c_void_p * len(chosen))(*[d.handle for d in chosen])
    endpoint = f"{host}:{port}"
    parse_endpoint(endpoint)  # llama.cpp splits at the first ':': no IPv6 address
    sys.stdout.flush()
    start_server(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads or os.cpu_count() or 1,
                 len(chosen), arr)
    raise RuntimeError(f"llama.cpp's RPC server could not start on {endpoint} (see its message above: port taken?)")


def cpu_has_amx() -> bool:
    """True if llama.cpp's CPU backend was compiled with its AMX kernels (``AMX_INT8 = 1`` in
    ``llama_print_system_info``). ``-march=native`` builds them on Sapphire Rapids and later, and
    they segfault in ``ggml_backend_amx_mul_mat`` on the first multi-token batch (llama.cpp issue
    20824, open; seen here on a 2-core Sapphire Rapids VM, in plain llama-cpp-python too), so
    ``make venv`` builds x86-64 without them (``-mno-amx-*``)."""
    import llama_cpp

    return "AMX_INT8 = 1" in llama_cpp.llama_print_system_info().decode(errors="replace")


def main(argv: list[str] | None = None) -> int:
    """``python -m skippy.engine.runtime.backends rpc [cuda|vulkan|metal] [noamx]``: exit 1 naming a
    missing backend, or (``noamx``) when the CPU backend holds the AMX kernels."""
    names = [a for a in (sys.argv[1:] if argv is None else argv) if a]
    no_amx = "noamx" in names
    names = [n for n in names if n != "noamx"]
    missing = [n for n in names if backend_library(n) is None]
    lib = llama_cpp_lib_dir()
    for n in names:
        print(f"llama.cpp backend {n}: {backend_library(n) or 'MISSING'}")
    if missing:
        print(f"missing in {lib}: {', '.join('lib' + _LIB_STEMS[n] for n in missing)}", file=sys.stderr)
        return 1
    if no_amx:
        amx = cpu_has_amx()
        print(f"llama.cpp CPU backend AMX kernels: {'BUILT IN (they crash: rebuild)' if amx else 'left out'}")
        if amx:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

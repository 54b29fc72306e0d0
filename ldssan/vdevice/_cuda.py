"""What `torch.cuda` answers while the virtual gfx1250 is installed.

Launches on the virtual gfx1250 finish before the launching call returns, so every stream
is always idle: synchronization is a no-op, events complete when recorded, and
`Event.elapsed_time` is the host wall time between the two records (the emulation's time,
see `_timing`). The device shares the host's
random generator: `torch.cuda.manual_seed(s)` seeds it, so `torch.randn(..., device="cuda")`
is reproducible the way a test expects.
"""

from __future__ import annotations

import itertools
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ._errors import caller, unsupported
from ._mode import cuda_index

NAME = "Virtual gfx1250 (ldssan)"
ARCH = "gfx1250"
LDS_BYTES = 327680  # 320 KiB per workgroup on gfx1250 (docs/memory-model.md)
# Virtual: persistent kernels size their grid by this; every workgroup runs on the CPU,
# so it is kept small.
COMPUTE_UNITS = 4

_ORIG_STREAM = torch.cuda.Stream
_ORIG_EVENT = torch.cuda.Event


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


@dataclass(frozen=True)
class VirtualDeviceProperties:
    """The fields of torch's `_CudaDeviceProperties` a kernel test reads, for the virtual gfx1250."""

    name: str = NAME
    gcnArchName: str = ARCH
    major: int = 12
    minor: int = 5
    warp_size: int = 32
    multi_processor_count: int = COMPUTE_UNITS
    shared_memory_per_block: int = LDS_BYTES
    shared_memory_per_block_optin: int = LDS_BYTES
    shared_memory_per_multiprocessor: int = LDS_BYTES
    max_threads_per_block: int = 1024
    max_threads_per_multi_processor: int = 2048
    regs_per_multiprocessor: int = 0
    L2_cache_size: int = 0
    total_memory: int = _host_memory()  # tensors live in host memory
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    uuid: str = "ldssan-virtual-gfx1250"


PROPERTIES = VirtualDeviceProperties()
_stream_ids = itertools.count(1)


class Stream(_ORIG_STREAM):
    """A stream of the virtual device. A subclass of torch's class, so `isinstance` checks
    made against it (e.g. FlyDSL's argument registry, filled at import) still hold."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, device=None, priority=0, *, stream_ptr: int | None = None, **_kwargs):
        cuda_index("cuda" if device is None else device)
        self.priority = priority
        # 0 is the null (default) stream, as HIP spells it; FlyDSL reads `cuda_stream`
        self.cuda_stream = next(_stream_ids) if stream_ptr is None else int(stream_ptr)
        self.device = torch.device("cuda", 0)
        self.device_index = 0
        self.device_type = 1  # c10::DeviceType::CUDA

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def __enter__(self):
        _current.append(self)  # `with torch.cuda.Stream() as s:` makes s current
        return self

    def __exit__(self, *exc) -> None:
        _current.remove(self)

    def wait_event(self, event) -> None:
        return None

    def wait_stream(self, stream) -> None:
        return None

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    @property
    def _as_parameter_(self):
        import ctypes

        return ctypes.c_void_p(self.cuda_stream)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(("ldssan-stream", self.cuda_stream))

    def __repr__(self) -> str:
        return f"<ldssan virtual gfx1250 stream {self.cuda_stream:#x}>"


def ExternalStream(stream_ptr, device=None):
    return Stream(device, stream_ptr=stream_ptr)


class Event(_ORIG_EVENT):
    """An event of the virtual device: complete as soon as it is recorded; with
    `enable_timing`, it keeps the host clock at its last `record()`."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, external=False):
        self.enable_timing = enable_timing
        self.recorded = False
        self._at_ns = 0

    def record(self, stream=None) -> None:
        self.recorded = True
        self._at_ns = time.perf_counter_ns()

    def wait(self, stream=None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event) -> float:
        """Milliseconds between this event's record and `end_event`'s, as torch reports it:
        here the host wall time (emulated launches and host work), not a GPU clock."""
        if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'. "
                               f"(ldssan virtual gfx1250, at {caller()})")
        if not (self.recorded and end_event.recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time. "
                               f"(ldssan virtual gfx1250, at {caller()})")
        return (end_event._at_ns - self._at_ns) / 1e6

    def ipc_handle(self):
        raise unsupported("Event.ipc_handle", "no inter-process GPU memory")

    def __repr__(self) -> str:
        return f"<ldssan virtual gfx1250 event recorded={self.recorded}>"


_DEFAULT = None
_current: list = []


def default_stream(device=None) -> Stream:
    global _DEFAULT
    cuda_index("cuda" if device is None else device)
    if _DEFAULT is None:
        _DEFAULT = Stream(stream_ptr=0)
    return _DEFAULT


def current_stream(device=None) -> Stream:
    cuda_index("cuda" if device is None else device)
    return _current[-1] if _current else default_stream()


def set_stream(stream) -> None:
    _current[:] = [stream] if stream is not None else []


@contextmanager
def stream(s):
    if s is None:
        yield
        return
    _current.append(s)
    try:
        yield s
    finally:
        _current.remove(s)


@contextmanager
def device(dev):
    cuda_index("cuda" if dev is None or dev == -1 else dev)
    yield


@contextmanager
def device_of(obj):
    yield


def _idx(dev=None) -> int:
    return cuda_index("cuda" if dev is None else dev)


def get_device_name(device=None) -> str:
    _idx(device)
    return NAME


def get_device_properties(device=None) -> VirtualDeviceProperties:
    _idx(device)
    return PROPERTIES


def get_device_capability(device=None) -> tuple[int, int]:
    _idx(device)
    return PROPERTIES.major, PROPERTIES.minor


def synchronize(device=None) -> None:
    _idx(device)  # every launch has finished when its call returned


def _none(*_args, **_kwargs) -> None:
    return None


def _zero(*_args, **_kwargs) -> int:
    return 0  # the virtual device keeps no allocator statistics


def _seed(seed) -> None:
    # not torch.manual_seed: it calls torch.cuda.manual_seed_all itself (infinite recursion)
    torch.default_generator.manual_seed(int(seed))


def _raiser(what: str, why: str):
    def fail(*_args, **_kwargs):
        raise unsupported(what, why)

    return fail


_GRAPHS = "CUDA/HIP graphs capture device work, and the virtual device runs each launch at once"

# torch.cuda name -> what it is while the virtual device is installed
API = {
    "is_available": lambda: True,
    "is_initialized": lambda: True,
    "init": _none,
    "device_count": lambda: 1,
    "current_device": lambda: 0,
    "set_device": _idx,
    "get_device_name": get_device_name,
    "get_device_properties": get_device_properties,
    "get_device_capability": get_device_capability,
    "get_arch_list": lambda: [ARCH],
    "is_bf16_supported": lambda including_emulation=True: True,
    "synchronize": synchronize,
    "is_current_stream_capturing": lambda: False,
    "Stream": Stream,
    "ExternalStream": ExternalStream,
    "Event": Event,
    "current_stream": current_stream,
    "default_stream": default_stream,
    "set_stream": set_stream,
    "stream": stream,
    "device": device,
    "device_of": device_of,
    "manual_seed": _seed,
    "manual_seed_all": _seed,
    "seed": lambda: torch.default_generator.seed(),
    "seed_all": lambda: torch.default_generator.seed(),
    "initial_seed": lambda: torch.default_generator.initial_seed(),
    "get_rng_state": lambda device="cuda": torch.get_rng_state(),
    "set_rng_state": lambda new_state, device="cuda": torch.set_rng_state(new_state),
    "get_rng_state_all": lambda: [torch.get_rng_state()],
    "set_rng_state_all": lambda new_states: torch.set_rng_state(new_states[0]),
    "empty_cache": _none,
    "reset_peak_memory_stats": _none,
    "memory_allocated": _zero,
    "max_memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_reserved": _zero,
    "mem_get_info": lambda device=None: (PROPERTIES.total_memory, PROPERTIES.total_memory),
    "memory_stats": lambda device=None: {},
    "memory_stats_as_nested_dict": lambda device=None: {},
    "reset_accumulated_memory_stats": _none,
    "reset_max_memory_allocated": _none,
    "reset_max_memory_cached": _none,
    "memory_cached": _zero,
    "max_memory_cached": _zero,
    "graph": _raiser("torch.cuda.graph", _GRAPHS),
    "CUDAGraph": _raiser("torch.cuda.CUDAGraph", _GRAPHS),
    "make_graphed_callables": _raiser("torch.cuda.make_graphed_callables", _GRAPHS),
    "graph_pool_handle": _raiser("torch.cuda.graph_pool_handle", _GRAPHS),
    "_sleep": _raiser("torch.cuda._sleep", "the virtual device has no clock to spin on"),
}

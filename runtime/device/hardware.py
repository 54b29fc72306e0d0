"""The host side of running device builds on a real gfx1250 (HIP): find the device, allocate
and bind the record buffer, read it back as a validated `Ring`, hand records to the decoder.

Two ways to bind the buffer (DESIGN.md, "Hardware"):

* **In-process FlyDSL launches** (`on_device()`): the ring is a device tensor kept for the
  process's lifetime and its address is baked into the linked IR, as `emulated()` does with
  a CPU tensor. The address and `target=hw` are in the build's cache key, so such a build
  never serves a compile-only, emulated, sanitized or plain run, and an address in a cached
  build never dangles. FlyDSL loads and launches the code object as any kernel.
* **Standalone code objects** (`ldssan build --device` output loaded by the user's own HIP
  program): the address must be written into a module global after loading
  (`bind_module_global`, `hipModuleGetGlobal` + `hipMemcpyHtoD`): builds bound to no buffer
  (`build.building()`, `ldssan build --device`) read the address from `@__ldssan_ring`
  (`has_ring_global` tells; binding refuses a code object without it).

A shadow in global scratch (kernels whose LDS leaves no room, dynamic LDS) needs its slots
bound before every launch (`DeviceRing.bind_scratch`, the grid and LDS size are known only
there); FlyDSL's launch path has no such hook yet, so `on_device()` refuses those kernels at
link time. One launch id per `on_device()` block: records name the sites of one build.

Nothing here runs without a gfx1250: every entry point checks `unavailable_reason()` first
and raises `HardwareUnavailable` with it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import uuid
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

from ldssan.passes.ir.errors import LdssanError
from ..records import Record, RecordFormatError, Ring
from . import layout as L
from .emulated import _LINK_FAILURES, DEFAULT_CAPACITY
from .session import device_records

ARCH = "gfx1250"
RING_SYMBOL = L.RING_GLOBAL  # the module global a standalone code object reads the address from
HW_OPTION = "target=hw"  # in the sentinel: FlyDSL's whole pipeline after the link, a real launch


class HardwareUnavailable(LdssanError, RuntimeError):
    """No gfx1250 HIP device here (the message says what is missing)."""


class HardwareRunError(LdssanError, RuntimeError):
    """A device run whose records cannot be attributed (the message says why)."""


def unavailable_reason() -> str | None:
    """Why device builds cannot run here, or None when a gfx1250 HIP device is present."""
    try:
        import torch
    except ImportError:
        return "no gfx1250 HIP device: torch is not installed"
    if getattr(torch.version, "hip", None) is None:
        return "no gfx1250 HIP device: this torch is not a ROCm build (torch.version.hip is None)"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "no gfx1250 HIP device: the HIP runtime sees no GPU"
    archs = [torch.cuda.get_device_properties(i).gcnArchName for i in range(torch.cuda.device_count())]
    if not any(a.split(":")[0] == ARCH for a in archs):
        return f"no gfx1250 HIP device: found {', '.join(archs)}"
    return None


def gfx1250_device() -> int:
    """The index of the first gfx1250 HIP device; HardwareUnavailable otherwise."""
    reason = unavailable_reason()
    if reason is not None:
        raise HardwareUnavailable(f"ldssan device runtime: {reason}")
    import torch

    return next(i for i in range(torch.cuda.device_count())
                if torch.cuda.get_device_properties(i).gcnArchName.split(":")[0] == ARCH)


def ring_from_bytes(raw: bytes) -> Ring:
    """The record buffer's bytes (header with the launch id, then records) as a validated
    `Ring`: only the kept records are passed on, so `Ring.from_bytes` checks that the
    header's counts agree with what the kernel wrote."""
    if len(raw) < L.RECORDS_AT:
        raise RecordFormatError(f"ldssan device runtime: {len(raw)} bytes is shorter than the record header")
    cap, written, dropped, _launch, _pad = L.RING_HEADER.unpack_from(raw, 0)
    if L.RECORDS_AT + 32 * cap > len(raw):
        raise RecordFormatError(f"ldssan device runtime: header capacity {cap} over the buffer's "
                                f"{(len(raw) - L.RECORDS_AT) // 32} records")
    kept = min(written, cap)
    return Ring.from_bytes(Ring.HEADER.pack(cap, written, dropped) + raw[L.RECORDS_AT: L.RECORDS_AT + 32 * kept])


class DeviceRing:
    """The record buffer in the gfx1250's global memory (a torch tensor on the device), laid
    out as `emulated.RecordBuffer`: the launch descriptor (layout.DESC), then the ring; the
    address baked into the IR is the ring's."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        import torch

        self.capacity = capacity
        self.device = f"cuda:{gfx1250_device()}"
        self.whole = torch.zeros(L.DESC_BYTES + L.RECORDS_AT + 32 * capacity, dtype=torch.uint8, device=self.device)
        self.tensor = self.whole[L.DESC_BYTES:]
        self.addr = self.tensor.data_ptr()
        self.slots = None

    def _write(self, at: int, data: bytes) -> None:
        import torch

        self.whole[at: at + len(data)].copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))

    def reset(self, launch: int, capacity: int | None = None) -> None:
        """Empty the buffer and set the launch id the kernel stamps on its records (and the
        records it keeps: at most the buffer's)."""
        cap = self.capacity if capacity is None else min(capacity, self.capacity)
        self.whole.zero_()
        self._write(L.DESC_BYTES, L.RING_HEADER.pack(cap, 0, 0, launch & 0xFFFFFFFF, 0))

    def bind_scratch(self, layout: dict, grid, lds_bytes: int) -> None:
        """Before a launch whose shadow is in global scratch (`layout` as linked, `where`
        "global scratch"): zeroed slots for every workgroup of `grid`, sized for the launch's
        LDS, and the descriptor the kernel reads them from. What a HIP launcher calls on the
        launch's stream before the kernel."""
        import torch

        lay = L.ShadowLayout(layout["waves"], layout["sites"], layout["lds_bytes"], layout["copies"], True)
        gx, gy, gz = (int(g) for g in grid)
        words, n = lay.words_for(lds_bytes), gx * gy * gz
        if self.slots is None or self.slots.numel() < n * words:
            self.slots = torch.zeros(n * words, dtype=torch.int32, device=self.device)
        else:
            self.slots.zero_()
        self._write(0, L.DESC.pack(self.slots.data_ptr(), gx, gy, lds_bytes, words, n))

    def read(self) -> Ring:
        """Wait for the device, copy the buffer back, validate it."""
        import torch

        torch.cuda.synchronize(self.tensor.device)
        return ring_from_bytes(self.tensor.cpu().numpy().tobytes())


@functools.cache
def device_ring() -> DeviceRing:
    """The process's ring (kept: cached builds carry its address)."""
    return DeviceRing()


@dataclass
class HardwareRun:
    """What one `on_device()` block produced."""

    ring: DeviceRing
    launch: int
    session: object = None  # build.Session: the site table of every build linked in the block
    grid: tuple | None = None  # the launch grid, if 2-D/3-D (records carry the packed block id)
    _records: list[Record] | None = field(default=None, repr=False)

    def sites_json(self) -> str:
        linked = self.session.linked if self.session is not None else []
        if len(linked) != 1:
            raise HardwareRunError(
                f"ldssan device runtime: {len(linked)} kernel builds were linked in this on_device() block; "
                "records name sites of one build (one launch id per block on hardware), so run one kernel "
                "build per block, the first time this process launches it (a cached build links nothing)")
        return linked[0].sites_json

    def records(self) -> list[Record]:
        """The block's records: linear workgroup ids, settled (settle.py)."""
        if self._records is None:
            self._records = device_records(self.ring.read(), self.grid)
        return self._records


_LAUNCHES = [0]


@contextmanager
def on_device(*, grid: tuple | None = None):
    """FlyDSL launches inside the block are instrumented, linked with the device runtime and
    the record buffer's address, and run on the gfx1250. Read `run.records()` after."""
    from .build import device_session

    ring = device_ring()
    _LAUNCHES[0] += 1
    ring.reset(_LAUNCHES[0])
    run = HardwareRun(ring, _LAUNCHES[0], grid=grid)
    with device_session(ring.addr, HW_OPTION, lds_only=True) as session:
        run.session = session
        yield run


# --- standalone code objects: the address through a module global ------------------------

def has_ring_global(elf: bytes) -> bool:
    """Whether a code object defines the `__ldssan_ring` symbol (a NUL-delimited string-table name)."""
    return b"\0" + RING_SYMBOL.encode() + b"\0" in elf


def _hip():
    name = ctypes.util.find_library("amdhip64") or "libamdhip64.so"
    try:
        return ctypes.CDLL(name)
    except OSError as exc:
        raise HardwareUnavailable(f"ldssan device runtime: cannot load the HIP runtime ({name}): {exc}") from exc


def bind_module_global(module: int, elf: bytes, ring: DeviceRing) -> None:
    """Write the ring's device address into `__ldssan_ring` of a code object the caller
    loaded with `hipModuleLoadData` (`module` is its hipModule_t handle, `elf` its bytes)."""
    gfx1250_device()
    if not has_ring_global(elf):
        raise HardwareRunError(f"ldssan device runtime: the code object has no {RING_SYMBOL} global: it was "
                               "linked with a baked address (run it through on_device(), not standalone)")
    hip = _hip()
    ptr, size = ctypes.c_void_p(), ctypes.c_size_t()
    err = hip.hipModuleGetGlobal(ctypes.byref(ptr), ctypes.byref(size), ctypes.c_void_p(module),
                                 RING_SYMBOL.encode())
    if err != 0 or size.value != 8:
        raise HardwareRunError(f"ldssan device runtime: hipModuleGetGlobal({RING_SYMBOL}) failed "
                               f"(hipError {err}, size {size.value})")
    addr = ctypes.c_uint64(ring.addr)
    err = hip.hipMemcpyHtoD(ptr, ctypes.byref(addr), ctypes.c_size_t(8))
    if err != 0:
        raise HardwareRunError(f"ldssan device runtime: hipMemcpyHtoD to {RING_SYMBOL} failed (hipError {err})")


# --- FLYDSL_LDSSAN_DEVICE=hardware: every FlyDSL launch of the process --------------------

# In the sentinel of this process's hardware builds: FlyDSL's disk cache then never serves a
# build another process linked (its site table was never seen here, its ring address may
# be this process's by chance).
_PROCESS = uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Built:
    """What decoding a hardware build's records needs, taken when the build was linked."""

    sites_json: str
    coverage_json: str
    kernels: tuple[str, ...]
    buffers: tuple  # runtime.session.LdsBufferInfo of the kernel's own LDS


class _ModuleOf:
    """`view_module` takes an ir.Module; a pass has the module's operation."""

    def __init__(self, op):
        self.operation = op
        self.body = op.regions[0].blocks[0]


class HardwareLaunches:
    """FLYDSL_LDSSAN_DEVICE=hardware. While installed, every FlyDSL build gets the device
    runtime linked in with the device ring's address baked in and goes through FlyDSL's whole
    pipeline (`config`); FlyDSL loads and launches it as any kernel; when a launch returns,
    the ring is read back (synchronizing) and handed to `on_finish` as a `SessionOutcome`.
    A shadow in global scratch is refused at link time (`build.Session.lds_only`).

    The HIP seam is FlyDSL's call-state constructor (`jit_function._call_state_from_spec`:
    it loads the code object; the state launches it), wrapped while installed; `inner`
    stands in for it (tests, which have no gfx1250)."""

    def __init__(self, *, capacity: int, on_finish, inner=None):
        from ..emu.frontend import EmuConfig
        from .emulated import source_digest

        gfx1250_device()  # HardwareUnavailable, with the reason, before anything is built
        self.ring = device_ring()
        self.capacity = capacity
        self.on_finish = on_finish
        self.inner = inner
        self.launch = 0
        self.built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # artifact -> Built
        self.pending: list[Built] = []  # linked, its artifact not launched yet
        self.config = EmuConfig(sanitize=True, pass_options=f"device={source_digest()},ctx={self.ring.addr:x},"
                                                            f"{HW_OPTION},proc={_PROCESS}")
        self.session = None
        self._orig = None

    def install(self) -> None:
        from flydsl.compiler import jit_function

        from ..emu import frontend
        from .build import _ACTIVE, Session

        frontend.install()
        frontend.register_pass("dev", self._pass)
        _LINK_FAILURES.clear()
        self.session = Session(self.config, lds_only=True)
        _ACTIVE.insert(0, self.session)  # under any building() block opened later
        self._orig = jit_function._call_state_from_spec
        jit_function._call_state_from_spec = self._call_state

    def uninstall(self) -> None:
        from flydsl.compiler import jit_function

        from .build import _ACTIVE

        if self._orig is not None:
            jit_function._call_state_from_spec = self._orig
            self._orig = None
        if self.session in _ACTIVE:
            _ACTIVE.remove(self.session)

    def _pass(self, op, pass_=None) -> None:
        """At the sentinel: instrument and link (build's recording pass: the site table, the
        scratch refusal), then keep what decoding needs, and untag the module as emulator
        input so FlyDSL's own call state launches it."""
        from ldssan.passes.ir.irview import view_module

        from .build import _recording_pass
        from .session import kernel_buffers

        _recording_pass(op, pass_)
        view = view_module(_ModuleOf(op))
        kernels = tuple(name for name, fn in view.functions.items() if fn.is_kernel)
        self.pending.append(Built(op.attributes["ldssan.sites"].value, op.attributes["ldssan.coverage"].value,
                                  kernels, kernel_buffers(view)))
        del op.attributes["ldssan.emu"]

    def _call_state(self, call_spec, artifact):
        from ..emu import frontend

        built = self.built.get(artifact)
        if built is None and self.pending:
            # FlyDSL builds the call state right after the build it compiled: that is the one linked last
            built = self.built[artifact] = self.pending.pop()
            self.pending.clear()
        if built is None and frontend.current() is self.config and not frontend._is_emu_artifact(artifact):
            raise HardwareRunError(f"ldssan device runtime: {getattr(artifact, '_entry', '?')}: a build this "
                                   "process did not link was served; its records could not be named")
        state = (self.inner or self._orig)(call_spec, artifact)
        return state if built is None else HardwareCall(self, built, state, getattr(artifact, "_entry", ""))


class HardwareCall:
    """FlyDSL's call state for one linked build: each call is one launch id, read back after."""

    def __init__(self, launches: HardwareLaunches, built: Built, state, entry: str):
        self.launches, self.built, self.state, self.entry = launches, built, state, entry

    def __call__(self, args_tuple):
        from .session import outcome

        hw = self.launches
        hw.launch += 1
        hw.ring.reset(hw.launch, hw.capacity)
        result = self.state(args_tuple)
        ring = hw.ring.read()
        try:
            # FlyDSL's launch path does not say the grid: a 2-D/3-D record cannot be linearized
            out = outcome(ring, None, entry=self.entry, kernels=self.built.kernels, launch=hw.launch,
                          sites_json=self.built.sites_json, coverage_json=self.built.coverage_json,
                          buffers=self.built.buffers)
        except ValueError as exc:
            raise HardwareRunError(f"{exc} ({', '.join(self.built.kernels)})") from None
        hw.on_finish(out)
        return result

"""A native run: consecutive lane-wise ops of a lockstep translation, compiled to one C
function over the lanes, and its call at run time.

The C function is `int NR<k>(int64_t L, char **P)` (nonzero: a load left its tensor): P holds
the inputs' addresses, then the outputs', then the buffer windows' (`_window`), then each
input's lane stride (a descriptor field may come uniform or per lane). A uniform input is
read once; per-lane inputs and outputs are C-contiguous arrays of L lanes (a strided
view is copied first), so the lane loop is plain affine code the compiler vectorizes. `call`
returns None when an input is not of the dtype and shape the translation expected, a window
check fails, or the module did not build: the generated code then runs the ops' Python lines.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Slot:
    """A value crossing the run's boundary: its dtype and elements per lane (1: a scalar)."""

    dtype: np.dtype
    width: int
    varying: bool | None = True  # per lane; False: one value for all lanes; None: either (read per lane)


@dataclass
class NativeRun:
    name: str  # the C function
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    ops: tuple[str, ...]  # the op names it compiles, in order
    # buffer accesses: (input index of the base, of num_records, a store?) per descriptor
    windows: tuple[tuple[int, int, bool], ...] = ()
    fn: object = None  # the loaded function; None: not built (codegen.NativeSummary.why)
    # not built yet (a deferred build, codegen.NativeSummary): told the work each call would
    # have done natively, it builds the module once that work pays for the compile
    lazy: object = None
    calls: int = field(default=0, compare=False)
    fallbacks: int = field(default=0, compare=False)

    def bind(self, lib: ctypes.CDLL) -> None:
        fn = getattr(lib, self.name)
        fn.argtypes = (ctypes.c_int64, ctypes.c_void_p)
        fn.restype = ctypes.c_int
        self.fn = fn


def _as_input(x, slot: Slot, L: int) -> np.ndarray | None:
    """Input `x` as the C reads it: a uniform value of the slot's shape, or C-contiguous lanes
    (copied if it is a view); None if its dtype or shape is not the slot's."""
    a = x if type(x) is np.ndarray else np.asarray(x)
    if a.dtype != slot.dtype:
        return None
    shape = () if slot.width == 1 else (slot.width,)
    if slot.varying is False or (slot.varying is None and a.shape == shape):  # None: either (lane stride 0)
        return a if a.shape == shape else None
    if a.shape != (L,) + shape:
        return None
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _window(gmem, base: np.ndarray, nrec: np.ndarray, store: bool, whole: bool) -> tuple[int, ...] | None:
    """For a buffer access: (host minus device address of its tensor, whether a store marks
    written bytes, host minus device address of the tensor's written-byte mask, the tensor's
    device bounds), or None (the Python line then resolves each lane). `whole`: the tensor
    holds every lane's whole window [base, base + num_records), so no access can leave it;
    else it holds every lane's base, and the C checks each address it reads (returning 1 if
    one leaves it). What `GlobalMemory.read` / `write` record is recorded here."""
    lo = int(base.min())
    hi = int((base + nrec).max()) if whole else int(base.max()) + 1
    r = gmem.find(lo, max(1, hi - lo)) if hi > lo else None
    if r is None:
        return None
    bounds = (r.base, r.base + r.size)
    if store and gmem.tracking:
        return (r.view.ctypes.data - r.base, 1, gmem.written_mask(r).view.ctypes.data - r.base) + bounds
    if gmem.tracking:
        gmem.read_bases.add(r.base)
    return (r.view.ctypes.data - r.base, 0, 0) + bounds


def _windows(run: NativeRun, gmem, ins: tuple) -> np.ndarray | None:
    """D for the run's buffer accesses: 5 numbers per window (`_window`), then the dry-run
    flag; or None (the Python lines run). A run that stores must never stop half way (lanes
    before the stop would have stored, and the Python lines would run after them): when every
    window lies whole inside its tensor nothing can stop it; else (kernels often pass
    num_records = 2^32 - 1) each window is the tensor holding every lane's base, the C checks
    every address, and the flag asks for a dry run first."""
    stores = any(w[2] for w in run.windows)
    D = _fill(run, gmem, ins, whole=stores)
    if D is None and stores:
        D = _fill(run, gmem, ins, whole=False)
        if D is not None:
            D[-1] = 1
    return D


def _fill(run: NativeRun, gmem, ins: tuple, whole: bool) -> np.ndarray | None:
    D = np.zeros(5 * len(run.windows) + 1, np.int64)
    regions = []
    for k, (b, r, store) in enumerate(run.windows):
        # from the values as given: a uniform field is one number, not L copies
        d = _window(gmem, np.asarray(ins[b]), np.asarray(ins[r]), store, whole=whole)
        if d is None:
            return None
        D[5 * k: 5 * k + 5] = d
        regions.append(d[3])
    if any(w[2] and regions.count(regions[k]) > 1 for k, w in enumerate(run.windows)):
        # the store writes a tensor the run's loads read: lane after lane would let one
        # lane read another's new bytes, where the interpreter loads every lane first
        return None
    return D


def call(run: NativeRun, ctx, ins: tuple) -> tuple | None:
    """The run's outputs for lanes 0..L-1, or None (the caller runs the Python lines)."""
    fn = run.fn
    if fn is None:
        if run.lazy is None or not run.lazy.owe(ctx.L * len(run.ops)):
            return None
        fn = run.fn
        if fn is None:
            return None
    L = ctx.L
    n = len(ins)
    ptrs = np.zeros(n + len(run.outputs) + 2, np.uint64)
    strides = np.zeros(n, np.int64)  # per input: elements from one lane to the next (0: one value)
    held = [strides]
    for k, (x, slot) in enumerate(zip(ins, run.inputs)):
        a = _as_input(x, slot, L)
        if a is None:
            run.fallbacks += 1
            return None
        held.append(a)
        ptrs[k] = a.ctypes.data
        if a.ndim > (slot.width > 1):
            strides[k] = slot.width
    ptrs[-1] = strides.ctypes.data
    deltas = None
    if run.windows:
        deltas = _windows(run, ctx.gmem, ins)
        if deltas is None:
            run.fallbacks += 1
            return None
        ptrs[-2] = deltas.ctypes.data
    outs = tuple(np.empty((L,) if s.width == 1 else (L, s.width), s.dtype) for s in run.outputs)
    for k, o in enumerate(outs):
        ptrs[n + k] = o.ctypes.data
    if deltas is not None and deltas[-1]:
        # a dry run first (no store lands; every address is checked against its tensor), so
        # the run that stores never stops half way; it is pure up to its stores: run it again
        if fn(L, ptrs.ctypes.data):
            run.fallbacks += 1
            return None
        deltas[-1] = 0
    if fn(L, ptrs.ctypes.data):
        run.fallbacks += 1
        return None
    run.calls += 1
    return outs

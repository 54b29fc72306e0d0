"""Race provenance on the virtual gfx1250: which output bytes a racy LDS access can reach.

Used by `ldssan rows` only. While a `tracking(sources)` block is active, kernels are
translated with a second set of variables: `T<name>` beside every value `<name>` holds the
value's taint, a per-lane bitset (int 0 when clean, else a numpy uint64 scalar or (L,)
array; bit k = race k). Outside such a block nothing here runs and the generated code is
the plain one (the translation cache keys on the mode).

Propagation (`emit`, after each op's own lines):
- data ops: a result's taint is the OR of its operands' taints (per lane; a vector or an
  aggregate has one taint per lane, not per element);
- cross-lane ops (shuffles, DPP, permlane, readlane, ballot, WMMA): the OR over the wave;
- LDS: a taint shadow per byte of the batch's LDS (stores write it, loads OR it); a load or
  store at a racy site by a racy (workgroup, wave, lane) adds the race's bit (`TaintSource`);
- global memory and buffer resources: a taint shadow per 4-byte word of each tensor region
  (lazily allocated on the first tainted store), read back by `results()`;
- scf: yields/iter args copy taint (ops/scf.py calls `Translator.taint_set`).

Not followed: async/TDM copies (their bytes keep whatever taint the destination had) and
control dependence through loop conditions (scf.if results do take the condition's taint).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ldssan.passes.ir.types import byte_size

MAX_BITS = 64  # races beyond the 64th share the last bit (`TaintState.bit_of`)


@dataclass(frozen=True)
class TaintSource:
    """One racy access pattern: loads (`reads`) or stores (`writes`) at `site` of `kernel` by
    these workgroups, waves and lanes (empty set = all) taint with `bit`."""

    kernel: str
    site: int
    bit: int
    waves: frozenset = frozenset()
    lanes: frozenset = frozenset()
    workgroups: frozenset = frozenset()
    reads: bool = True
    writes: bool = False


class TaintState:
    """The shadows of one tracked call: LDS per batch (on the LDS object), global per region."""

    def __init__(self, sources):
        self.by_site: dict[tuple[str, int], list[TaintSource]] = {}
        for s in sources:
            self.by_site.setdefault((s.kernel, s.site), []).append(s)
        self.gshadow: dict[int, tuple[int, np.ndarray]] = {}  # region base -> (size, words)
        self.loads_tainted = 0  # racy loads that produced a tainted lane (a sanity figure)

    def region_words(self, region, create: bool):
        got = self.gshadow.get(region.base)
        if got is None or got[0] < region.size:
            if not create:
                return None
            got = (region.size, np.zeros((region.size + 3) // 4, dtype=np.uint64))
            self.gshadow[region.base] = got
        return got[1]

    def tensor_taint(self, tensor) -> np.ndarray:
        """Per-element taint bits (uint64, tensor's shape) of a CPU tensor after the call."""
        shape = tuple(tensor.shape)
        item = tensor.element_size()
        off = np.zeros(shape, dtype=np.int64)
        for d, (n, st) in enumerate(zip(shape, tensor.stride())):
            ax = [1] * len(shape)
            ax[d] = n
            off = off + np.arange(n, dtype=np.int64).reshape(ax) * st
        addr = tensor.data_ptr() + off * item
        out = np.zeros(shape, dtype=np.uint64)
        for base, (size, words) in self.gshadow.items():
            inside = (addr >= base) & (addr + item <= base + size)
            if not inside.any():
                continue
            rel = addr[inside] - base
            bits = words[rel >> 2]
            if item > 4 or (item > 1 and (rel & 3).any()):
                bits = bits | words[np.minimum((rel + item - 1) >> 2, len(words) - 1)]
            out[inside] |= bits
        return out


_state = threading.local()


def current() -> TaintState | None:
    return getattr(_state, "taint", None)


@contextmanager
def tracking(sources):
    """Translate and run kernels with taint inside the block; yields the `TaintState`."""
    prev = current()
    st = TaintState(sources)
    _state.taint = st
    try:
        yield st
    finally:
        _state.taint = prev


# ------------------------------------------------------------------------------- translation

CROSS_LANE = frozenset({
    "gpu.shuffle", "rocdl.readfirstlane", "rocdl.readlane", "rocdl.ballot", "rocdl.ds_bpermute",
    "rocdl.update.dpp", "rocdl.ds_swizzle", "rocdl.permlanex16", "rocdl.permlane16.var",
    "rocdl.permlanex16.var", "rocdl.permlane16.swap", "rocdl.permlane32.swap",
})


MEMREF_ACCESSES = frozenset({"memref.load", "vector.load", "memref.store", "vector.store"})


def _space(t) -> int:
    return t.width if t.kind == "ptr" else -1


def _or(t, vids) -> str:
    return " | ".join(f"Tv{v}" for v in vids) or "0"


def emit(t, op) -> None:
    """The taint lines of `op` (after its own lines); scf ops do theirs in ops/scf.py."""
    name = op.name
    if name.startswith("scf."):
        return
    kn = repr(t.fn.name)
    if name == "llvm.call" and op.attr("callee") == "__ldssan_ds":
        t.out(f"ctx.tsite = int({t.v(op.operands[0])})")  # the site of the LDS op that follows
    elif name == "llvm.load":
        ptr, nb = op.operands[0], byte_size(op.result_types[0])
        if _space(op.operand_types[0]) == 3:
            t.out(f"Tv{op.results[0]} = R.t_lds_load(ctx, {kn}, {t.v(ptr)}, {nb}, {t.mask})")
        else:
            t.out(f"Tv{op.results[0]} = R.t_global_load(ctx, {t.lanes(ptr)}, {nb}, {t.mask})")
    elif name == "llvm.store":
        val, ptr = op.operands
        nb = byte_size(op.operand_types[0])
        if _space(op.operand_types[1]) == 3:
            t.out(f"R.t_lds_store(ctx, {kn}, {t.v(ptr)}, {nb}, Tv{val}, {t.mask})")
        else:
            t.out(f"R.t_global_store(ctx, {t.lanes(ptr)}, {nb}, Tv{val}, {t.mask})")
    elif name in MEMREF_ACCESSES:
        pass  # ops/memref.py writes their taint lines with the address it computed
    elif name in ("llvm.atomicrmw", "llvm.cmpxchg"):
        ptr = op.operands[0]
        nb = byte_size(op.operand_types[-1])
        res = op.results[0]
        if _space(op.operand_types[0]) == 3:
            t.out(f"Tv{res} = R.t_lds_load(ctx, {kn}, {t.v(ptr)}, {nb}, {t.mask})")
            t.out(f"R.t_lds_store(ctx, {kn}, {t.v(ptr)}, {nb}, Tv{res} | {_or(t, op.operands[1:])}, {t.mask})")
        else:
            t.out(f"Tv{res} = R.t_global_load(ctx, {t.lanes(ptr)}, {nb}, {t.mask})")
            t.out(f"R.t_global_store(ctx, {t.lanes(ptr)}, {nb}, Tv{res} | {_or(t, op.operands[1:])}, {t.mask})")
    elif name == "rocdl.raw.ptr.buffer.load":
        rsrc, voff, soff = op.operands[:3]
        nb = byte_size(op.result_types[0])
        t.out(f"Tv{op.results[0]} = R.t_buffer_load(ctx, {t.v(rsrc)}, {t.v(voff)}, {t.v(soff)}, {nb}, {t.mask})")
    elif name == "rocdl.raw.ptr.buffer.store":
        data, rsrc, voff, soff = op.operands[:4]
        nb = byte_size(op.operand_types[0])
        t.out(f"R.t_buffer_store(ctx, {t.v(rsrc)}, {t.v(voff)}, {t.v(soff)}, {nb}, Tv{data}, {t.mask})")
    elif name in CROSS_LANE or name.startswith("rocdl.wmma"):
        for r in op.results:
            t.out(f"Tv{r} = R.t_wave(ctx, {_or(t, op.operands)})")
    else:
        for r in op.results:
            t.out(f"Tv{r} = {_or(t, op.operands)}")

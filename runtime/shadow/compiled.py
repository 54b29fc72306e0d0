"""The shadow's hot checks compiled to C: the clean cases of `LdsShadow`'s read groups and
plain writes, one pass over the rows instead of several numpy gathers and scatters.

Each function first checks every row and returns 1, having changed nothing, at the first
sign of anything but the clean case (an entry not yet known to be ordered, a never-written
byte); the numpy path then runs, unchanged, and decides (it may catch the clock lineage up
and find the access clean after all). Only when every row is clean does the C record the
access, writing what the numpy path writes, in the same order. So the results are the numpy
path's bit for bit (tests/shadow/test_fastpath.py compares all three engines -- reference,
numpy, compiled -- on random programs; tests/sanitizer/test_compiled_checks.py, the GEMM).

Where the numpy path gathers `bad[slots]`, the C reads `bad[e]` per entry; an event id at or
past the bitmap's end counts as not known (1), as `Clock.bad` reads ids >= L.

Built once per machine by `runtime/cc.py` (0.14 s cold, then loaded from the disk cache);
without a compiler the shadow stays numpy. Used by lockstep launches that have native runs
(`Session.begin_batch`); `FLYDSL_LDSSAN_NATIVE=off` turns both off.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ldssan.passes.ir.caches import register_reset

from ..cc import NativeBuildError, load

# SLOT: the slots' event id type, _S: its suffix. rows: int64 shadow rows (may repeat).
_TEMPLATE = r"""
int reads_check_S(int64_t n, const int64_t *rows, int64_t W, const uint8_t *bad, int64_t nbad,
                  const SLOT *lastw, const uint8_t *multi, const SLOT *wl) {
  /* check_reads: every row written, its write entries ordered (only last_w's unless multi) */
  for (int64_t i = 0; i < n; i++) {
    int64_t r = rows[i];
    SLOT l = lastw[r];
    if (l == 0 || l >= nbad || bad[l]) return 1;
    if (multi[r]) {
      const SLOT *s = wl + r * W;
      for (int64_t w = 0; w < W; w++)
        if (s[w] >= nbad || bad[s[w]]) return 1;
    }
  }
  return 0;
}

void reads_store_S(int64_t n, const int64_t *rows, int64_t W, int64_t wave, const SLOT *lastw,
                   SLOT *rs, const int64_t *eids, int64_t eid0, uint8_t *lanes, const uint8_t *gl, SLOT *rlast) {
  /* store_reads: read slot, its lane and last_w at the read, row by row (a later one wins) */
  for (int64_t i = 0; i < n; i++) {
    int64_t r = rows[i];
    rs[r * W + wave] = (SLOT)(eids[i] + eid0);
    lanes[r * 2 * W + W + wave] = gl[i];
    rlast[r * W + wave] = lastw[r];
  }
}

int write_S(int64_t n, const int64_t *rows, int64_t W, int64_t wave, const uint8_t *bad, int64_t nbad,
            int64_t eid, SLOT *lastw, SLOT *prev, uint8_t *multi, SLOT *wl, SLOT *rs, uint8_t *lanes,
            const uint8_t *gl, int64_t lane, SLOT *last) {
  /* apply, a plain write that finds every write and read entry ordered */
  for (int64_t i = 0; i < n; i++) {
    int64_t r = rows[i];
    const SLOT *s = wl + r * W, *q = rs + r * W;
    for (int64_t w = 0; w < W; w++)
      if (s[w] >= nbad || q[w] >= nbad || bad[s[w]] || bad[q[w]]) return 1;
    last[i] = lastw[r];  /* gathered before any row changes, as numpy's take */
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t r = rows[i];
    SLOT *s = wl + r * W, *q = rs + r * W;
    prev[r] = last[i];
    lastw[r] = (SLOT)eid;
    multi[r] = 0;
    for (int64_t w = 0; w < W; w++) { s[w] = 0; q[w] = 0; }
    s[wave] = (SLOT)eid;
    lanes[r * 2 * W + wave] = gl ? gl[i] : (uint8_t)lane;
  }
  return 0;
}
"""
_TYPES = {8: ("int64_t", "i64"), 4: ("int32_t", "i32")}
SOURCE = "#include <stdint.h>\n" + "".join(
    _TEMPLATE.replace("_S(", f"_{s}(").replace("SLOT", t)
    for t, s in _TYPES.values())


def _rows_ok(rows: np.ndarray) -> bool:
    return rows.dtype == np.int64 and rows.flags.c_contiguous


def _bytes_ok(a: np.ndarray, n: int) -> bool:
    return a.dtype == np.uint8 and a.flags.c_contiguous and a.size == n


_STATE = ("lastw", "prev", "multi", "wl", "rs", "lanes", "rlast")


def _state(sh) -> tuple[int, ...] | None:
    """The addresses of the shadow's state arrays (taking an address costs microseconds: kept
    until `_set_granule` replaces the arrays, which it does all at once); None if one is not
    C-contiguous (never expected: they are made by np.zeros / np.repeat)."""
    got = sh.__dict__.get("_c_state")
    if got is None or got[0] is not sh.wl:
        arrays = [getattr(sh, name) for name in _STATE]
        ptrs = tuple(a.ctypes.data for a in arrays) if all(a.flags.c_contiguous for a in arrays) else None
        got = sh._c_state = (sh.wl, ptrs)
    return got[1]


class Kernels:
    """The compiled functions for one slot dtype (4 or 8 bytes). Every argument is passed
    as a 64-bit integer (pointers as addresses: the same registers in the x86-64 and AArch64
    calling conventions), so no ctypes object is made per call."""

    def __init__(self, lib: ctypes.CDLL, suffix: str):
        self._check = getattr(lib, f"reads_check_{suffix}")
        self._store = getattr(lib, f"reads_store_{suffix}")
        self._write = getattr(lib, f"write_{suffix}")
        for fn in (self._check, self._store, self._write):
            # as many as the C declares (a count off by one would pass a pointer as a C int)
            fn.argtypes = (ctypes.c_int64,) * (SOURCE.split(f"{fn.__name__}(", 1)[1].split(")", 1)[0].count(",") + 1)
        self._store.restype = None

    def reads_check(self, sh, g, bad: np.ndarray) -> bool:
        """`check_reads` finds read group `g` clean (every byte written, every write
        ordered), and `reads_store` can record it."""
        rows = g.rows
        st = _state(sh)
        if st is None or not (_rows_ok(rows) and _bytes_ok(g.lanes, rows.size) and g.eids.dtype == np.int64
                              and g.eids.flags.c_contiguous):
            return False
        lastw, _prev, multi, wl, _rs, _lanes, _rlast = st
        return not self._check(rows.size, rows.ctypes.data, sh.W, bad.ctypes.data, bad.size, lastw, multi, wl)

    def reads_store(self, sh, wave: int, rows: np.ndarray, eids: np.ndarray, eid0: int, lanes: np.ndarray) -> None:
        lastw, _prev, _multi, _wl, rs, slanes, rlast = _state(sh)
        self._store(rows.size, rows.ctypes.data, sh.W, wave, lastw, rs, eids.ctypes.data, eid0, slanes,
                    lanes.ctypes.data, rlast)

    def write(self, sh, wave: int, eid: int, rows: np.ndarray, lanes, bad: np.ndarray) -> bool:
        """A plain write recorded (True), or nothing changed (an entry to decide in numpy)."""
        per_row = type(lanes) is np.ndarray
        st = _state(sh)
        if st is None or not _rows_ok(rows) or not (_bytes_ok(lanes, rows.size) if per_row else 0 <= lanes <= 255):
            return False
        lastw, prev, multi, wl, rs, slanes, _rlast = st
        last = np.empty(rows.size, sh.wl.dtype)
        return not self._write(rows.size, rows.ctypes.data, sh.W, wave, bad.ctypes.data, bad.size, eid, lastw, prev,
                               multi, wl, rs, slanes, lanes.ctypes.data if per_row else 0,
                               0 if per_row else int(lanes), last.ctypes.data)


_LOCK = threading.Lock()
_LOADED: dict[int, Kernels | None] = {}  # by slot itemsize; None: did not build


def kernels(itemsize: int) -> Kernels | None:
    """The compiled checks for slots of `itemsize` bytes; None without a compiler."""
    got = _LOADED.get(itemsize, False)
    if got is not False:
        return got
    with _LOCK:
        if not _LOADED:
            try:
                lib = load(SOURCE)
            except NativeBuildError:
                lib = None
            for size, (_t, suffix) in _TYPES.items():
                _LOADED[size] = None if lib is None else Kernels(lib, suffix)
    return _LOADED.get(itemsize)


CLEAN = "clean"  # LdsShadow.check_reads: the C found the group clean (it stores it too)


# Rows below which an access stays in numpy: a C call's fixed cost (ctypes, the addresses of
# its arrays) is tens of microseconds, numpy's check of a few rows less (RMSNorm's writes of
# a few hundred rows were slower in C). Tests set 0 to run every access through the C.
MIN_ROWS = 1024


def write(sh, wave: int, eid: int, fp, bad: np.ndarray) -> bool:
    """`LdsShadow.apply` of plain write `eid` done in C (False: nothing changed)."""
    if fp.rows.size < MIN_ROWS:
        return False
    ck = kernels(sh.wl.dtype.itemsize)
    return ck is not None and ck.write(sh, wave, eid, fp.rows, fp.lanes, bad)


def reads_clean(sh, g, bad: np.ndarray) -> bool:
    """`LdsShadow.check_reads` of read group `g` found it clean in C (then `store_reads`)."""
    if g.rows.size < MIN_ROWS:
        return False
    ck = kernels(sh.wl.dtype.itemsize)
    return ck is not None and ck.reads_check(sh, g, bad)


def store_reads(sh, wave: int, g, eid0: int) -> None:
    kernels(sh.wl.dtype.itemsize).reads_store(sh, wave, g.rows, g.eids, eid0, g.lanes)


@register_reset
def _reset() -> None:
    _LOADED.clear()

"""Running one cross-lane op in a small MLIR kernel on the virtual gfx1250 (two waves of 32
lanes), optionally under a divergent exec mask, and the matching lane data for the plain-Python
definitions in `definitions.py`.

Every lane t (thread id 0..63) of workgroup g holds `src = 7*t + 3 + 1000*g` and
`old = -100 - t`; a lane outside the exec mask stores INACTIVE instead of running the op, so
the tests compare exactly the lanes the op defines. With several workgroups batched on the
lane axis, a value leaking between workgroups shows as a wrong thousand."""

from __future__ import annotations

import numpy as np

from ldssan.runtime.emu.launch import parse_module, run_kernel

from ..test_ops import module

N = 64
WAVE = 32
INACTIVE = -7777
T = np.arange(N)
SRC = 7 * T + 3
OLD = -100 - T

# exec masks: name -> (MLIR computing %act from %t, the same predicate in Python)
MASKS = {
    "all": (None, lambda t: True),
    "mod3": ("""
      %m3 = arith.remsi %t, %c3 : i32
      %act = arith.cmpi ne, %m3, %c1 : i32""", lambda t: t % 3 != 1),
    "lt20": ("""
      %act = arith.cmpi slt, %t, %c20 : i32""", lambda t: t < 20),
    "from9": ("""
      %l = arith.remsi %t, %c32 : i32
      %act = arith.cmpi sge, %l, %c9 : i32""", lambda t: t % 32 >= 9),
}

_PRELUDE = """
      %c1 = arith.constant 1 : i32
      %c3 = arith.constant 3 : i32
      %c7 = arith.constant 7 : i32
      %c9 = arith.constant 9 : i32
      %c20 = arith.constant 20 : i32
      %c32 = arith.constant 32 : i32
      %cm100 = arith.constant -100 : i32
      %src7 = arith.muli %t, %c7 : i32
      %src3 = arith.addi %src7, %c3 : i32
      %bidx = gpu.block_id x
      %bid = arith.index_cast %bidx : index to i32
      %c64 = arith.constant 64 : i32
      %c1000 = arith.constant 1000 : i32
      %gbase = arith.muli %bid, %c64 : i32
      %gid = arith.addi %gbase, %t : i32
      %gsrc = arith.muli %bid, %c1000 : i32
      %src = arith.addi %src3, %gsrc : i32
      %old = arith.subi %cm100, %t : i32"""

_STORE = """
      %p{k} = llvm.getelementptr %out{k}[%gid] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r{k}, %p{k} : i32, !llvm.ptr<1>"""


def run_op(op: str, results: list[str], mask: str = "all", i1: tuple[str, ...] = (), *,
           groups: int = 1, batch: int = 1) -> list[np.ndarray]:
    """Run the MLIR lines `op` (which may use %t, %src, %old and the i32 constants %c0, %c1,
    %c3, %c7, %c9, %c20, %c32) in every lane of `mask`; return, per name in `results` (i32 SSA
    values of `op`, or i1 ones listed in `i1`), the 64 stored lanes, INACTIVE where the lane was
    outside the mask. `groups` workgroups run, `batch` of them at once on the lane axis."""
    widen = "".join(f"\n      %w{k} = arith.extui {r} : i1 to i32" if r in i1
                    else f"\n      %w{k} = arith.addi {r}, %c0 : i32" for k, r in enumerate(results))
    body = _PRELUDE + "\n      %c0 = arith.constant 0 : i32"
    guard = MASKS[mask][0]
    names = ", ".join(f"%r{k}" for k in range(len(results)))
    types = ", ".join("i32" for _ in results)
    if guard is None:
        body += op + widen + "".join(f"\n      %r{k} = arith.addi %w{k}, %c0 : i32" for k in range(len(results)))
    else:
        yields = ", ".join(f"%w{k}" for k in range(len(results)))
        sentinels = ", ".join("%inactive" for _ in results)
        body += guard + f"""
      %inactive = arith.constant {INACTIVE} : i32
      {names} = scf.if %act -> ({types}) {{{op}{widen}
        scf.yield {yields} : {types}
      }} else {{
        scf.yield {sentinels} : {types}
      }}"""
    body += "".join(_STORE.format(k=k) for k in range(len(results)))
    params = ", ".join(f"%out{k}: !llvm.ptr<1>" for k in range(len(results)))
    outs = [np.full(N * groups, 12345, dtype=np.int32) for _ in results]
    view = parse_module(module(body, params))
    run_kernel(view, "kern", grid=(groups, 1, 1), block=(N, 1, 1), args=outs, batch=batch)
    return outs


def active(mask: str) -> np.ndarray:
    return np.array([bool(MASKS[mask][1](t)) for t in T])


def per_wave(ref, mask: str, *args, groups: int = 1) -> np.ndarray:
    """Apply the per-wave reference `ref(src32, old32, active32, *args) -> 32 values` to each
    wave of each workgroup; lanes outside the mask expect INACTIVE."""
    act = active(mask)
    want = np.empty((groups, N), dtype=np.int64)
    for g in range(groups):
        for w in range(N // WAVE):
            s = slice(w * WAVE, (w + 1) * WAVE)
            got = ref(list(SRC[s] + 1000 * g), list(OLD[s]), list(act[s]), *args)
            want[g, s] = [v if a else INACTIVE for v, a in zip(got, act[s])]
    return want.reshape(-1)

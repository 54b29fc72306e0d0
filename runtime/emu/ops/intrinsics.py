"""`llvm.call_intrinsic`: dispatched on the intrinsic's name through `INTRINSICS`, one small
emitter each. An intrinsic with no entry is refused naming it (and, like every refusal, the
op's own source line).

What each entry does, and the public definition it follows:
- `llvm.amdgcn.perm` (V_PERM_B32): each result byte selects from the 8 bytes of {S0, S1}
  (S1 is the low dword), with the ISA's special selectors 8..11 (sign of byte 1/3/5/7 spread
  over the byte), 12 (0x00) and >= 13 (0xff): RDNA/CDNA ISA guides, BYTE_PERMUTE.
- `llvm.amdgcn.{rcp,rsq,sqrt,exp2,log}.{f32,f16}`: the hardware's transcendental
  approximations (V_RCP_F32, ...; `log` is base 2). Emulated with correctly rounded IEEE
  operations in f32, so a result may differ from the hardware's by its documented error
  (about 1 ulp); special values (0, inf, negative, NaN) follow IEEE.
- scheduling hints that change no value and no memory ordering: `llvm.amdgcn.sched.barrier`,
  `sched.group.barrier`, `iglp.opt` (compiler-only, no instruction), `s.setprio` (wave issue
  priority), `s.sleep` (a delay): no-ops. The emulator's schedule never depends on timing.
- `llvm.amdgcn.s.setreg`: two writes to SCHED_MODE (hwreg id 26) are no-ops: the one
  `rocdl.disable_xdl_arb_stall` makes (the WMMA arbitration-stall bit: issue timing only), and
  DEP_MODE (bits 1:0) = 2, expert scheduling mode 2, which turns the hardware's VALU
  dependency interlocks off; LLVM's `amdgpu-expert-scheduling-mode` writes that same value at
  kernel entry and then inserts the dependency waits itself, so the IR's values do not change
  (whether the compiled code has those waits is the compiler's part, not checked here). Any
  other hardware-register write or value (float modes, traps, ...) may change values and is
  refused.
"""

from __future__ import annotations

from typing import Callable

from ldssan.passes.ir.irview import Op, walk
from ..errors import UnsupportedOp
from . import emits
from .arith import _dtype_expr

INTRINSICS: dict[str, Callable] = {}


def intrinsic(*names: str):
    def register(fn):
        for name in names:
            if name in INTRINSICS:
                raise RuntimeError(f"ldssan-emu: intrinsic {name!r} registered twice")
            INTRINSICS[name] = fn
        return fn

    return register


@emits("llvm.call_intrinsic")
def call_intrinsic(t, op: Op) -> None:
    name = op.attr("intrin")
    emit = INTRINSICS.get(name)
    if emit is None:
        raise UnsupportedOp(_named(name), op.loc,
                            "the virtual gfx1250 has no emitter for this intrinsic (`ldssan env` lists the "
                            "supported ones); please report")
    emit(t, op)


def _named(intrinsic_name: str) -> str:
    """The op name a refusal reports: the call and the intrinsic it calls."""
    return f'llvm.call_intrinsic "{intrinsic_name}"'


@intrinsic("llvm.amdgcn.perm")
def perm(t, op: Op) -> None:
    s0, s1, sel = (t.v(x) for x in op.operands)
    t.out(f"{t.v(op.results[0])} = np.asarray(R.perm({s0}, {s1}, {sel}))[()]")


_APPROX = ("rcp", "rsq", "sqrt", "exp2", "log")


def _approx(kind: str):
    def emit(t, op: Op) -> None:
        dt = _dtype_expr(op.result_types[0])
        t.out(f"{t.v(op.results[0])} = np.asarray(R.amdgcn_approx({kind!r}, {t.v(op.operands[0])}, {dt}))[()]")

    return emit


for _kind in _APPROX:
    intrinsic(f"llvm.amdgcn.{_kind}.f32", f"llvm.amdgcn.{_kind}.f16")(_approx(_kind))


@intrinsic("llvm.amdgcn.sched.barrier", "llvm.amdgcn.sched.group.barrier", "llvm.amdgcn.iglp.opt",
           "llvm.amdgcn.s.setprio", "llvm.amdgcn.s.sleep")
def scheduling_hint(t, op: Op) -> None:
    if op.results:  # none of these returns a value; a form that does is not the documented one
        raise UnsupportedOp(_named(op.attr("intrin")), op.loc, "a result of a scheduling hint")
    t.out("pass  # scheduling hint: no value, no memory ordering")


SCHED_MODE = 26
# (hwreg id, bit offset, bit count) of the writes that change issue timing only, with the one
# value accepted (None: any)
TIMING_ONLY_HWREG_WRITES = {
    (SCHED_MODE, 2, 1): (None, "the WMMA arbitration stall (rocdl.disable_xdl_arb_stall)"),
    (SCHED_MODE, 0, 2): (2, "DEP_MODE = 2, expert scheduling mode (amdgpu-expert-scheduling-mode)"),
}


@intrinsic("llvm.amdgcn.s.setreg")
def setreg(t, op: Op) -> None:
    imm = _constant(t, op.operands[0])
    field = None if imm is None else (imm & 0x3F, (imm >> 6) & 0x1F, ((imm >> 11) & 0x1F) + 1)
    value, what = TIMING_ONLY_HWREG_WRITES.get(field, (None, None))
    if what is None:
        where = "a hardware register named at run time" if field is None else \
            f"hwreg id {field[0]}, offset {field[1]}, size {field[2]}"
        raise UnsupportedOp(_named("llvm.amdgcn.s.setreg"), op.loc,
                            f"a write to {where}: it may change float modes or traps, which the virtual "
                            "gfx1250 does not model")
    written = None if value is None else _constant(t, op.operands[1])
    if value is not None and written != value:
        shown = "a value known only at run time" if written is None else f"the value {written}"
        raise UnsupportedOp(_named("llvm.amdgcn.s.setreg"), op.loc,
                            f"a write of {shown} to hwreg id {field[0]}, offset {field[1]}, size {field[2]}: "
                            f"only {value} ({what}) is modelled; public text does not say what the other "
                            "modes change")
    t.out(f"pass  # s_setreg of {what}: issue timing only")


def _constant(t, vid: int) -> int | None:
    """The integer value of `vid` when an arith/llvm constant in the function defines it."""
    for blk_op in walk(t.fn.body):
        if vid in blk_op.results and blk_op.name in ("arith.constant", "llvm.mlir.constant"):
            value = blk_op.attr("value")
            return int(value) if isinstance(value, (int, bool)) else None
    return None

"""Cross-lane ops in native runs: `gpu.shuffle` with a uniform offset and width.

A shuffle reads another lane's value, so it cannot sit in the lane loop that computes that
value: it starts a new stage of the run (`Compiled.cross`), one more loop over the lanes in
the same C function, after every lane has finished the stages before. Values a later stage
reads are written out by the stage that makes them (`plan.Planner._flush`), and the shuffle
reads its source lane there, as `rt.shuffle` does:

    end = (lane + width) & -width,  dst = lane ^ off | lane - off | lane + off | off  (i32)
    valid = dst < end,  src = lane_base + (valid ? dst : lane) % 32
    value = live[src] ? x[src] : 0

`AT(name;i)` in the C stands for the address of lane i's elements of the run value `name`
(an input's or an earlier stage's array), resolved when the run's function is written.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op, enum_word
from .compiled import MAX_WIDTH, Compiled, In, OpCompiler
from .cops import elem_of, width_of

_DST = {"xor": "(uint32_t)ln_ ^ (uint32_t)o_", "up": "(uint32_t)ln_ - (uint32_t)o_",
        "down": "(uint32_t)ln_ + (uint32_t)o_", "idx": "(uint32_t)o_"}


def compile_shuffle(p: OpCompiler, op: Op) -> Compiled | None:
    """The C of a `gpu.shuffle` for one lane (a stage's first op), or None."""
    t = p.t
    if len(op.operands) != 3 or len(op.results) != 2 or op.regions:
        return None
    val, offset, width = op.operands
    res, valid = op.results
    mode = enum_word(op.attr("mode"))
    rtype = op.result_types[0]
    elem = elem_of(rtype)
    if mode not in _DST or elem is None or width_of(rtype) > MAX_WIDTH or t.uniform(res) \
            or not (t.uniform(offset) and t.uniform(width)):
        return None
    src = p.value_in(val, op.operand_types[0])
    params = [p.literal(v, ty) or p.value_in(v, ty) for v, ty in zip((offset, width), op.operand_types[1:])]
    if src is None or any(x is None or (isinstance(x, In) and (x.elem.kind != "int" or x.width != 1))
                          for x in params):
        return None
    off, wid = (x if isinstance(x, str) else f"{x.cname}[0]" for x in params)
    mask = p.mask_in()
    nb = elem.bits // 8 * width_of(rtype)
    lines = [f"{{ int64_t ln_ = l & 31; int32_t o_ = (int32_t)({off}), w_ = (int32_t)({wid});",
             "  int32_t end_ = (int32_t)(((uint32_t)ln_ + (uint32_t)w_) & (uint32_t)(0u - (uint32_t)w_));",
             f"  int32_t dst_ = (int32_t)({_DST[mode]});",
             "  int ok_ = dst_ < end_;",
             "  int64_t src_ = (l - ln_) + ((ok_ ? (int64_t)dst_ : ln_) & 31);",
             f"  if (AT({mask.cname};src_)[0]) __builtin_memcpy(v{res}, AT({src.cname};src_), {nb});",
             f"  else __builtin_memset(v{res}, 0, {nb});",
             f"  v{valid}[0] = (uint8_t)ok_; }}"]
    ins = [src, mask] + [x for x in params if isinstance(x, In)]
    return Compiled(op, lines, ins, cross=True, source=src.cname)

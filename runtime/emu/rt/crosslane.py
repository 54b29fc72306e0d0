"""Cross-lane ops: shuffles, permutes, DPP, swizzles, readlane, ballot, mbcnt. Lanes only
ever exchange values within their own workgroup's 32 lanes (`ctx.lane_base` under batching).

Each op's semantics is written down in its docstring with the public source it follows;
tests/emu/conformance/ checks every op against an independent plain-Python reading of the
same definitions."""

from __future__ import annotations

import numpy as np

from ldssan.passes.ir.caches import register_reset

WAVE = 32


def _per_lane(ctx, value):
    v = np.asarray(value)
    return np.broadcast_to(v, (ctx.L,) + v.shape[1:]) if v.ndim else np.full(ctx.L, v)


def _i32(x):
    """Wrap int64 lane arithmetic to i32, as the lowered LLVM code computes it."""
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _live(ctx, mask):
    return np.broadcast_to(mask, (ctx.L,))


def _gather(ctx, value, src, take, fill):
    """Per lane: `value` of wave lane `src` (0..31, within the lane's own workgroup) where
    `take`, else `fill`. Scalar (L,) and vector (L, n) values alike."""
    value = _per_lane(ctx, value)
    got = value[ctx.lane_base + np.asarray(src, dtype=np.int64)]
    cond = np.broadcast_to(take, (ctx.L,)).reshape((ctx.L,) + (1,) * (value.ndim - 1))
    return np.where(cond, got, np.asarray(fill).astype(value.dtype)).astype(value.dtype, copy=False)


def shuffle(ctx, value, offset, width, mode: str, mask):
    """gpu.shuffle as MLIR's GPUToROCDL lowering (`GPUShuffleOpLowering`, the lowering FlyDSL's
    `convert-gpu-to-rocdl` runs) computes it, in i32 with `lane` = mbcnt lane id:

        end   = (lane + width) & -width          # end of the lane's width-group
        dst   = lane ^ off | lane - off | lane + off | off     (xor | up | down | idx)
        valid = dst <s end
        result = ds_bpermute((valid ? dst : lane) << 2, value)

    So `idx` takes an ABSOLUTE lane (not one relative to the lane's group), only the upper
    bound is checked (an `up` shuffle reads across the group start, and below lane 0 wraps
    round the wave, with valid = true), and a source lane that is inactive reads 0
    (ds_bpermute). Returns (value, valid)."""
    if np.ndim(offset) == 0 and np.ndim(width) == 0:  # the common case: uniform operands
        idx, valid = _shuffle_plan(mode, int(offset), int(width), ctx.L)
        v = _per_lane(ctx, value)
        got = v[idx]
        live = np.broadcast_to(mask, (ctx.L,))
        if live.all():  # every source lane live: no ds_bpermute zeros
            return got, valid.copy()
        take = live[idx].reshape((ctx.L,) + (1,) * (v.ndim - 1))
        return np.where(take, got, np.zeros((), v.dtype)).astype(v.dtype, copy=False), valid.copy()
    lane = ctx.lane
    off = np.asarray(offset, dtype=np.int64)
    width = np.asarray(width, dtype=np.int64)
    end = _i32(lane + width) & _i32(-width)
    dst = {"xor": lane ^ off, "up": lane - off, "down": lane + off, "idx": off}[mode]
    dst = _i32(np.broadcast_to(dst, lane.shape))
    valid = dst < end
    src = np.where(valid, dst, lane) % WAVE  # ds_bpermute reads address bits [6:2]
    return _gather(ctx, value, src, _live(ctx, mask)[ctx.lane_base + src], 0), valid


_PLANS: dict = {}


def _shuffle_plan(mode: str, off: int, width: int, L: int):
    """(source index into the lane array, valid) of a uniform shuffle, by the formula in
    `shuffle`. Every context lays its lanes out as `lane = l mod 32`, `lane_base = 32 *
    (l // 32)` (wave.py), so the plan depends on L only and is computed once."""
    key = (mode, off, width, L)
    plan = _PLANS.get(key)
    if plan is None:
        lane = np.tile(np.arange(WAVE, dtype=np.int64), L // WAVE)
        base = np.arange(L, dtype=np.int64) - lane
        end = _i32(lane + width) & _i32(-width)
        dst = _i32({"xor": lane ^ off, "up": lane - off, "down": lane + off,
                    "idx": np.full(L, off, dtype=np.int64)}[mode])
        valid = dst < end
        plan = _PLANS[key] = (base + np.where(valid, dst, lane) % WAVE, valid)
    return plan


@register_reset
def clear_plans() -> None:
    """Forget the shuffle plans (ldssan.runtime.reset_caches)."""
    _PLANS.clear()


def bpermute(ctx, addr, value, mask):
    """ds_bpermute_b32 (backward permute, no LDS memory touched): each active lane reads
    `value` of source lane (addr / 4) mod 32 — the byte address is divided by 4 and its high
    bits are ignored in wave32. A source lane that is inactive yields 0 (AMD RDNA ISA
    pseudo-code of DS_BPERMUTE_B32: EXEC applies to the source read; LLVM's
    llvm.amdgcn.ds.bpermute, whose docs say reads from inactive lanes return 0)."""
    src = (np.asarray(addr, dtype=np.int64) >> 2) % WAVE
    live = _live(ctx, mask)
    return _gather(ctx, value, src, live[ctx.lane_base + src] & live, 0)


def readfirstlane(ctx, value, mask):
    first = int(np.argmax(mask)) if mask.any() else 0
    v = np.asarray(value)
    return v[first] if v.ndim >= 1 and v.shape[0] == ctx.L else v


def readfirstlane_groups(ctx, value, mask):
    """readfirstlane under batching: each workgroup's first active lane, broadcast to its lanes."""
    v = _per_lane(ctx, value)
    B = ctx.L // WAVE
    first = np.argmax(np.asarray(mask).reshape(B, WAVE), axis=1) + np.arange(B) * WAVE
    return np.repeat(v[first], WAVE, axis=0)


def readlane_groups(ctx, value, lane, uniform: bool):
    v = _per_lane(ctx, value)
    B = ctx.L // WAVE
    src = np.arange(B) * WAVE + (np.asarray(lane, dtype=np.int64).reshape(-1)[::WAVE] if np.ndim(lane) else int(lane))
    picked = v[src]
    return picked[0] if uniform else np.repeat(picked, WAVE, axis=0)


def ballot(ctx, cond, mask, dtype, uniform: bool = True):
    """Bitmask of the lanes (of each workgroup) where `cond` holds."""
    bits = np.asarray(np.broadcast_to(cond, (ctx.L,)) & mask).reshape(-1, WAVE)
    packed = np.packbits(bits, axis=1, bitorder="little").view(np.uint32)[:, 0].astype(np.uint64)
    out = packed.astype(np.dtype(dtype).newbyteorder("=")) if np.dtype(dtype).itemsize >= 4 else packed
    out = out.astype(dtype)
    return out[0] if uniform else np.repeat(out, WAVE)


def mbcnt(ctx, mask_bits, acc, hi: bool):
    lane = ctx.lane
    bits = np.uint64(int(mask_bits) & 0xFFFFFFFF)
    shift = np.where(hi, np.maximum(lane - 32, 0), np.minimum(lane, 32)).astype(np.uint64)
    below = (bits & ((np.uint64(1) << shift) - np.uint64(1)))
    cnt = np.array([bin(int(x)).count("1") for x in below], dtype=np.int32) if below.ndim else bin(int(below)).count("1")
    return (np.asarray(acc, dtype=np.int32) + cnt).astype(np.int32)


# ----------------------------------------------------------------------------- DPP

ROW = 16  # DPP rows: 16 lanes; banks: 4 lanes of a row


def dpp_control_name(ctrl: int) -> str | None:
    """The DPP16 control `ctrl` in assembler spelling, or None when gfx12 (wave32) has no such
    control: the GFX9-only wave_shl/rol/shr/ror and row_bcast15/31, and reserved codes
    (LLVM SIDefines.h `DppCtrl`; AMDGPU asm syntax docs, DPP16 modifiers)."""
    if 0 <= ctrl <= 0xFF:
        return "quad_perm:[" + ",".join(str((ctrl >> (2 * i)) & 3) for i in range(4)) + "]"
    base, n = ctrl & ~0xF, ctrl & 0xF
    named = {0x100: "row_shl", 0x110: "row_shr", 0x120: "row_ror", 0x150: "row_share", 0x160: "row_xmask"}
    if base in named and (n or base >= 0x150):
        return f"{named[base]}:{n}"
    return {0x140: "row_mirror", 0x141: "row_half_mirror"}.get(ctrl)


def _dpp_source(ctrl: int, lane):
    """(source lane, in range) for each lane under DPP16 control `ctrl` (see `dpp`)."""
    i = lane % ROW
    row = lane - i
    n = ctrl & 0xF
    if ctrl <= 0xFF:  # quad_perm: lane i of each quad reads lane sel[i] of the quad
        return lane - lane % 4 + ((ctrl >> (2 * (lane % 4))) & 3), np.ones_like(lane, dtype=bool)
    if ctrl & ~0xF == 0x100:  # row_shl:n: lane i reads i + n of its row
        return row + (i + n) % ROW, i + n < ROW
    if ctrl & ~0xF == 0x110:  # row_shr:n: lane i reads i - n of its row
        return row + (i - n) % ROW, i - n >= 0
    inside = {
        0x120: lambda: (i - n) % ROW,  # row_ror:n: rotate right within the row
        0x150: lambda: np.full_like(i, n),  # row_share:n: every lane reads lane n of its row
        0x160: lambda: i ^ n,  # row_xmask:n: lane i reads i ^ n of its row
    }.get(ctrl & ~0xF) or {
        0x140: lambda: ROW - 1 - i,  # row_mirror
        0x141: lambda: i - i % 8 + 7 - i % 8,  # row_half_mirror: mirror within 8 lanes
    }[ctrl]
    return row + inside(), np.ones_like(lane, dtype=bool)


def dpp(ctx, old, src, ctrl: int, row_mask: int, bank_mask: int, bound_ctrl: bool, mask):
    """rocdl.update.dpp = llvm.amdgcn.update.dpp(old, src, dpp_ctrl, row_mask, bank_mask,
    bound_ctrl): `v_mov_b32_dpp dst(=old), src` (LLVM AMDGPUUsage / IntrinsicsAMDGPU.td;
    DPP16 rules from the RDNA ISA guides). Per lane:

    - lanes of a row whose row_mask bit (row = lane / 16) or bank_mask bit
      (bank = lane % 16 / 4) is clear are not written: they keep `old`;
    - otherwise the lane reads `src` of the source lane `dpp_ctrl` names (quad_perm,
      row_shl/shr/ror:1..15, row_mirror, row_half_mirror, row_share/row_xmask:0..15). A
      source outside the row (row_shl/shr) or inactive in EXEC (fetch-inactive is 0 for
      update.dpp) is invalid: the lane gets 0 if bound_ctrl, else keeps `old`."""
    lane = ctx.lane
    src_lane, in_range = _dpp_source(int(ctrl), lane)
    ok = in_range & _live(ctx, mask)[ctx.lane_base + src_lane]
    old = _per_lane(ctx, old)
    moved = _move(ctx, src, src_lane, ok, old, bound_ctrl)
    enabled = ((row_mask >> (lane // ROW)) & 1 & (bank_mask >> (lane % ROW // 4))).astype(bool)
    return np.where(_cond(enabled, old), moved, old).astype(old.dtype, copy=False)


def _cond(c, like):
    c = np.asarray(c)
    return c.reshape(c.shape + (1,) * (np.ndim(like) - c.ndim))


def _move(ctx, src, src_lane, ok, old, bound_ctrl: bool):
    """`src` of `src_lane` where the read is valid (`ok`); elsewhere 0 with bound_ctrl, else
    `old` (the DPP / permlane rule for invalid or inactive sources)."""
    got = _gather(ctx, src, src_lane, ok, 0)
    if bound_ctrl:
        return got
    old = _per_lane(ctx, old)
    return np.where(_cond(ok, old), got, old).astype(got.dtype, copy=False)


# ----------------------------------------------------------------------------- ds_swizzle


def swizzle(ctx, value, offset, mask):
    """rocdl.ds_swizzle = ds_swizzle_b32 with the 16-bit `offset` (AMD RDNA ISA, DS_SWIZZLE_B32;
    LLVM AMDGPU asm `swizzle(...)` macros and SIDefines.h `Swizzle`):

    - offset[15:8] == 0x80, quad-perm mode: lane i of each quad reads lane
      offset[2i+1:2i] of the quad;
    - offset[15] == 0, bit-mask mode on 32 lanes: lane i reads
      ((i & and_mask) | or_mask) ^ xor_mask with and = offset[4:0], or = offset[9:5],
      xor = offset[14:10].

    A source lane that is inactive reads 0 (as ds_bpermute). Other offsets (the rotate and
    FFT modes, 0xC000/0xE000) are refused."""
    off = int(np.asarray(offset).reshape(-1)[0]) & 0xFFFF
    lane = ctx.lane
    if off & 0xFF00 == 0x8000:
        src = lane - lane % 4 + ((off >> (2 * (lane % 4))) & 3)
    elif not off & 0x8000:
        src = ((lane & (off & 0x1F)) | ((off >> 5) & 0x1F)) ^ ((off >> 10) & 0x1F)
    else:
        raise NotImplementedError(f"ds_swizzle offset {off:#06x}: only the quad-perm (0x80xx) and "
                                  "bit-mask (bit 15 clear) modes are modeled")
    return _gather(ctx, value, src, _live(ctx, mask)[ctx.lane_base + src], 0)


# ----------------------------------------------------------------------------- permlane


def permlane(ctx, old, src, sel, fi: bool, bound_ctrl: bool, cross: bool, mask):
    """v_permlane16/v_permlanex16 and their gfx12 `.var` forms (llvm.amdgcn.permlane16,
    .permlanex16, .permlane16.var, .permlanex16.var; RDNA ISA pseudo-code). `sel` gives each
    lane a 4-bit lane index j; lane i of row r (16 lanes) reads `src` of lane 16*r + j
    (permlane16) or of the OTHER row of its 32 lanes, 16*(r^1) + j (permlanex16).

    - rocdl.permlanex16 (old, src0, src1, src2): j = bits [4*(i%16)+3 : 4*(i%16)] of the
      64-bit selector src2:src1 (uniform);
    - the .var forms (old, src0, src1): j = src1 of the lane itself, low 4 bits.

    An inactive source lane is read anyway if `fi` (fetch inactive); otherwise the lane gets 0
    if bound_ctrl, else keeps `old`. `sel` is the per-lane j, decoded by the caller."""
    lane = ctx.lane
    row = lane - lane % ROW
    src_lane = (row ^ ROW if cross else row) + (np.asarray(sel, dtype=np.int64) & 0xF)
    ok = np.ones(ctx.L, dtype=bool) if fi else _live(ctx, mask)[ctx.lane_base + src_lane]
    return _move(ctx, src, src_lane, ok, old, bound_ctrl)


def permlane_select(ctx, lo, hi):
    """The 4-bit lane index of each lane from the uniform 64-bit selector hi:lo."""
    word = np.uint64((int(np.asarray(hi).reshape(-1)[0]) & 0xFFFFFFFF) << 32
                     | int(np.asarray(lo).reshape(-1)[0]) & 0xFFFFFFFF)
    return ((word >> (4 * (ctx.lane % ROW)).astype(np.uint64)) & np.uint64(0xF)).astype(np.int64)


def collapse_uniform(ctx, per_lane, mask):
    """A result the uniformity analysis calls uniform, computed per lane: the common value of
    the active lanes; a cross-lane op that made them differ is refused, not guessed."""
    v = np.asarray(per_lane)
    live = _live(ctx, mask)
    if not live.any():
        return v[0]
    first = v[int(np.argmax(live))]
    if not (v[live] == first).all():
        raise NotImplementedError("a cross-lane op with uniform operands produced different values "
                                  "in different lanes (inactive source lanes); not modeled")
    return first


def transpose8(x, mask):
    """ds_load_tr16_b128's redistribution of (L, 8) per-lane reads: in each group of 8 lanes,
    lane 8g+i receives element i of lanes 8g..8g+7, in lane order (ROCm's description of
    the instruction: four independent 8x8 transposes per wave). What an inactive lane of a
    partly active group contributes is not publicly defined: refused."""
    L = x.shape[0]
    groups = np.broadcast_to(np.asarray(mask, bool), (L,)).reshape(L // 8, 8)
    if (groups.any(axis=1) & ~groups.all(axis=1)).any():
        raise NotImplementedError("ds_load_tr16_b128 under an exec mask that splits a group of 8 lanes: "
                                  "what an inactive lane contributes is not publicly defined")
    return np.ascontiguousarray(x.reshape(L // 8, 8, 8).transpose(0, 2, 1)).reshape(L, 8)

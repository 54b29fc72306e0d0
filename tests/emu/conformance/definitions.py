"""The documented definitions of the cross-lane ops, one wave (32 lanes) at a time, in plain
per-lane Python: written from the public sources named in each docstring, independently of
the emulator's vectorised run-time (`ldssan.runtime.emu.rt.crosslane`), which the tests check
against these.

Arguments: `src`, `old` are the 32 lane values, `active` the exec mask; each function
returns the 32 result values (entries of inactive lanes are ignored by the tests)."""

from __future__ import annotations

WAVE = 32


def _i32(x: int) -> int:
    return (x + 2**31) % 2**32 - 2**31


def bpermute_read(src, active, lane: int) -> int:
    """ds_bpermute_b32 reading wave lane `lane` (address bits [6:2]): 0 if it is inactive."""
    lane %= WAVE
    return src[lane] if active[lane] else 0


# -- gpu.shuffle ------------------------------------------------------------------------------


def shuffle(src, old, active, mode: str, offset: int, width: int):
    """gpu.shuffle as lowered by MLIR convert-gpu-to-rocdl (LowerGpuOpsToROCDLOps.cpp,
    GPUShuffleOpLowering), which FlyDSL's ROCm pipeline runs: in i32,
    end = (lane + width) & -width; dst = lane^off / lane-off / lane+off / off (xor, up, down,
    idx); valid = dst < end (signed); read lane (valid ? dst : lane) with ds_bpermute.
    Returns a list of (value, valid)."""
    out = []
    for lane in range(WAVE):
        end = _i32(lane + width) & _i32(-width)
        if mode == "xor":
            dst = lane ^ offset
        elif mode == "up":
            dst = lane - offset
        elif mode == "down":
            dst = lane + offset
        else:
            dst = offset
        dst = _i32(dst)
        valid = dst < end
        out.append((bpermute_read(src, active, dst if valid else lane), int(valid)))
    return out


# -- DPP ----------------------------------------------------------------------------------------


def dpp_source(ctrl: int, lane: int) -> int | None:
    """The lane a DPP16 control reads for `lane`, None outside the row (LLVM SIDefines.h
    DppCtrl encodings; AMDGPU assembler DPP16 modifiers): quad_perm 0x00-0xFF, row_shl
    0x101-0x10F, row_shr 0x111-0x11F, row_ror 0x121-0x12F, row_mirror 0x140,
    row_half_mirror 0x141, row_share 0x150-0x15F, row_xmask 0x160-0x16F. Rows are 16 lanes."""
    row, i = divmod(lane, 16)
    n = ctrl & 0xF
    if ctrl <= 0xFF:
        quad, k = divmod(lane, 4)
        return 4 * quad + ((ctrl >> (2 * k)) & 3)
    kind = ctrl >> 4
    if kind == 0x10:  # row_shl: data moves to lower lanes
        j = i + n
    elif kind == 0x11:  # row_shr: data moves to higher lanes
        j = i - n
    elif kind == 0x12:  # row_ror: rotate right
        j = (i - n) % 16
    elif ctrl == 0x140:
        j = 15 - i
    elif ctrl == 0x141:
        j = (i // 8) * 8 + 7 - i % 8
    elif kind == 0x15:  # row_share
        j = n
    elif kind == 0x16:  # row_xmask
        j = i ^ n
    else:
        raise ValueError(f"not a gfx12 DPP16 control: {ctrl:#x}")
    return 16 * row + j if 0 <= j < 16 else None


def update_dpp(src, old, active, ctrl: int, row_mask: int, bank_mask: int, bound_ctrl: bool):
    """llvm.amdgcn.update.dpp(old, src, ctrl, row_mask, bank_mask, bound_ctrl) (AMDGPUUsage;
    RDNA ISA DPP16): a lane whose row (lane/16) or bank (lane%16/4) is masked off keeps old;
    otherwise it reads src of its DPP source lane, and a source outside the row or inactive
    gives 0 with bound_ctrl, old without."""
    out = []
    for lane in range(WAVE):
        if not (row_mask >> (lane // 16)) & 1 or not (bank_mask >> (lane % 16 // 4)) & 1:
            out.append(old[lane])
            continue
        s = dpp_source(ctrl, lane)
        if s is None or not active[s]:
            out.append(0 if bound_ctrl else old[lane])
        else:
            out.append(src[s])
    return out


# -- ds_swizzle -----------------------------------------------------------------------------------


def ds_swizzle(src, old, active, offset: int):
    """ds_swizzle_b32 (RDNA ISA; LLVM AMDGPU `swizzle()` asm macros): offset[15:8] == 0x80 is
    quad-perm mode, lane k of each quad reads lane offset[2k+1:2k] of the quad; offset[15] == 0
    is bit-mask mode, lane i reads ((i & and) | or) ^ xor with and = offset[4:0],
    or = offset[9:5], xor = offset[14:10]. An inactive source reads 0."""
    out = []
    for lane in range(WAVE):
        if offset & 0xFF00 == 0x8000:
            s = lane // 4 * 4 + ((offset >> (2 * (lane % 4))) & 3)
        else:
            and_m, or_m, xor_m = offset & 31, (offset >> 5) & 31, (offset >> 10) & 31
            s = ((lane & and_m) | or_m) ^ xor_m
        out.append(bpermute_read(src, active, s))
    return out


# -- permlane -------------------------------------------------------------------------------------


def permlane(src, old, active, selects, cross: bool, fi: bool, bound_ctrl: bool):
    """v_permlane16_b32 / v_permlanex16_b32 and the gfx12 .var forms (LLVM
    llvm.amdgcn.permlane16/.permlanex16(.var); RDNA ISA pseudo-code): lane i of row r reads
    lane selects[i] (4 bits) of row r (permlane16) or of the other row r^1 (permlanex16). An
    inactive source lane is read anyway with fi; without fi it gives 0 with bound_ctrl, old
    without."""
    out = []
    for lane in range(WAVE):
        row = lane // 16
        s = 16 * (row ^ 1 if cross else row) + (selects[lane] & 15)
        if active[s] or fi:
            out.append(src[s])
        else:
            out.append(0 if bound_ctrl else old[lane])
    return out


def permlane_selects(lo: int, hi: int) -> list[int]:
    """Lane i's 4-bit select from the 64-bit selector hi:lo of v_permlane(x)16_b32."""
    word = (hi & 0xFFFFFFFF) << 32 | (lo & 0xFFFFFFFF)
    return [(word >> (4 * (lane % 16))) & 15 for lane in range(WAVE)]


# -- lane reads ------------------------------------------------------------------------------------


def readlane(src, old, active, lane: int):
    """v_readlane_b32: every lane gets src of lane `lane` (read whatever EXEC says)."""
    return [src[lane % WAVE]] * WAVE


def readfirstlane(src, old, active):
    """v_readfirstlane_b32: src of the lowest active lane."""
    first = next((i for i in range(WAVE) if active[i]), 0)
    return [src[first]] * WAVE


def ballot(cond, active):
    """llvm.amdgcn.ballot.i32: bit i set iff lane i is active and cond holds in it."""
    bits = sum(1 << i for i in range(WAVE) if active[i] and cond[i])
    return [_i32(bits)] * WAVE


def mbcnt(bits: int, acc: int, hi: bool):
    """v_mbcnt_lo/hi_u32_b32: acc + the number of set bits of `bits` for lanes below this one,
    lanes 0..31 (lo) or 32..63 (hi; none of them are below a wave32 lane)."""
    out = []
    for lane in range(WAVE):
        below = 0 if hi else lane
        out.append(acc + bin(bits & ((1 << below) - 1)).count("1"))
    return out

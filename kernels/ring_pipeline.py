"""The LDS ring pipeline of the bundled GEMM, shared with the MegaMoE grouped GEMM.

`ring_layout` sizes an nb-stage ring of A/B tiles (rows padded for the TDM), and
`RingPipeline` issues a K-tile stage into a slot with TDM loads split over the waves and
computes a K-tile from a slot (ds_load_b128 fragments, WMMA). The kernels that use it keep
their own schedules and synchronisation lines (see `ldssan.kernels.gemm`'s docstring for the
protocol and the TDM descriptor fields).
"""

import math
from dataclasses import dataclass

import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl.expr import const_expr, range_constexpr
from flydsl.expr.typing import Vector as Vec

WAVE_SIZE = 32  # gfx1250 is wave32 only
LDS_BYTES_MAX = 327680  # addressable LDS per workgroup on gfx1250
LDS_PAD_BYTES = 16  # TDM row padding of the A/B ring tiles (0 disables it)
# TDM loads one wave issues per pipeline stage: its slice of A and its slice of B.
# Every tensorcnt wait of the K loop is derived from this count.
TDM_PER_WAVE = 2
# Async scale loads a wave may leave in flight at the epilogue barrier.
WMMA_M = WMMA_N = 16
_WMMA_K = {"fp8": 128, "bf16": 32}  # K depth of one WMMA per input kind
_ELEM_BYTES = {"fp8": 1, "bf16": 2}
_WAVE_GRID = {4: (2, 2), 8: (2, 4)}  # waves -> (m_waves, n_waves)


def _pad_encodable(row_payload_bytes: int, pad_bytes: int) -> bool:
    # TDM padding: interval (payload row) must be a power-of-two number of dwords
    # (encoded log2(dw)-1 in 3 bits), amount 1..128 dwords.
    if pad_bytes == 0:
        return True
    if row_payload_bytes % 4 or pad_bytes % 4:
        return False
    dw = row_payload_bytes // 4
    return dw >= 2 and dw & (dw - 1) == 0 and int(math.log2(dw)) - 1 <= 7 and pad_bytes // 4 <= 128


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class RingLayout:
    """Geometry of the TDM-fed A/B LDS ring and the WMMA wave grid of one output tile.

    Shared by ``gemm_kernel`` and the grouped GEMM of ``kernels/mega_moe.py`` (which feeds
    bf16 A with FP8 B: ``a_kind`` and ``b_kind`` may differ, the WMMA then runs in bf16 and
    the FP8 fragments are widened to bf16 in registers, exactly). Byte offsets are relative
    to the start of the ring; slot ``s`` starts at ``s * slot_bytes``, holds A
    ``[tile_m][tile_k]`` (row pitch ``a_row``) then B ``[tile_n][tile_k]`` (row pitch
    ``b_row``) at ``b_off``.
    """

    a_kind: str  # "fp8" | "bf16"
    b_kind: str
    mma: str  # the WMMA's input kind: "fp8" only when both operands are FP8
    tile_m: int
    tile_n: int
    tile_k: int  # elements
    waves: int
    nb: int
    m_waves: int
    n_waves: int
    wmma_k: int  # elements
    a_elem_bytes: int
    b_elem_bytes: int
    a_pad: int  # TDM pad bytes after every LDS row
    b_pad: int
    a_row: int  # LDS row pitch (bytes)
    b_row: int
    a_bytes: int
    slot_bytes: int
    ring_bytes: int

    @property
    def block(self) -> int:
        return WAVE_SIZE * self.waves

    @property
    def b_off(self) -> int:
        return self.a_bytes

    @property
    def ksteps(self) -> int:
        """WMMA K-steps per k-tile."""
        return self.tile_k // self.wmma_k

    @property
    def rm(self) -> int:
        """16-row WMMA blocks per wave."""
        return self.tile_m // self.m_waves // WMMA_M

    @property
    def rn(self) -> int:
        """16-column WMMA blocks per wave."""
        return self.tile_n // self.n_waves // WMMA_N


def ring_layout(a_kind: str, b_kind: str, tile_m: int, tile_n: int, tile_k: int, waves: int, nb: int,
                *, m_waves: int | None = None, who: str = "gemm") -> RingLayout:
    """Validate a ring/WMMA specialisation and derive its geometry; ValueError names ``who``.

    The wave grid is ``m_waves x waves/m_waves`` (default: 2 x 2 for 4 waves, 2 x 4 for 8).
    The caller checks the LDS total (it adds its own regions after ``ring_bytes``)."""
    for name, kind in (("input", a_kind), ("weight", b_kind)):
        if kind not in _WMMA_K:
            raise ValueError(f"{who}: {name} kind must be 'fp8' or 'bf16', got {kind!r}")
    if a_kind == "fp8" and b_kind != "fp8":
        raise ValueError(f"{who}: FP8 A needs FP8 B (the mixed pipeline is bf16 A x FP8 B)")
    mma = "fp8" if a_kind == b_kind == "fp8" else "bf16"
    if waves not in _WAVE_GRID:
        raise ValueError(f"{who}: waves must be 4 or 8, got {waves!r}")
    if nb not in (2, 3, 4):
        raise ValueError(f"{who}: nb (LDS ring stages) must be 2, 3 or 4, got {nb!r}")
    for name, v in (("tile_m", tile_m), ("tile_n", tile_n), ("tile_k", tile_k)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{who}: {name} must be a positive int, got {v!r}")
    wk = _WMMA_K[mma]
    if tile_k < wk:
        raise ValueError(
            f"{who}: tile_k={tile_k} is below the {mma} WMMA depth {wk} (16x16x{wk}); "
            f"tile_k must be a positive multiple of {wk}"
        )
    if tile_k % wk:
        raise ValueError(f"{who}: tile_k={tile_k} must be a multiple of the {mma} WMMA depth {wk}")
    mw, nw = _WAVE_GRID[waves]
    if m_waves is not None:
        if m_waves not in (1, 2, 4) or waves % m_waves:
            raise ValueError(f"{who}: m_waves must divide waves ({waves}), got {m_waves!r}")
        mw, nw = m_waves, waves // m_waves
    if tile_m % (WMMA_M * mw):
        raise ValueError(f"{who}: tile_m={tile_m} must be a multiple of {WMMA_M * mw} ({mw} waves along M x 16)")
    if tile_n % (WMMA_N * nw):
        raise ValueError(f"{who}: tile_n={tile_n} must be a multiple of {WMMA_N * nw} ({nw} waves along N x 16)")
    if tile_m > 65535 or tile_n > 65535 or tile_k > 65535:
        raise ValueError(f"{who}: tile extents must fit the 16-bit TDM tile fields")
    aeb, beb = _ELEM_BYTES[a_kind], _ELEM_BYTES[b_kind]
    a_pad = LDS_PAD_BYTES if _pad_encodable(tile_k * aeb, LDS_PAD_BYTES) else 0
    b_pad = LDS_PAD_BYTES if _pad_encodable(tile_k * beb, LDS_PAD_BYTES) else 0
    a_row, b_row = tile_k * aeb + a_pad, tile_k * beb + b_pad
    a_bytes = tile_m * a_row
    slot = _align(a_bytes + tile_n * b_row, 128)
    return RingLayout(
        a_kind=a_kind, b_kind=b_kind, mma=mma, tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, waves=waves,
        nb=nb, m_waves=mw, n_waves=nw, wmma_k=wk, a_elem_bytes=aeb, b_elem_bytes=beb, a_pad=a_pad,
        b_pad=b_pad, a_row=a_row, b_row=b_row, a_bytes=a_bytes, slot_bytes=slot, ring_bytes=nb * slot,
    )


# ---------------------------------------------------------------------------
# Device helpers (straight-line code: no dynamic control flow)
# ---------------------------------------------------------------------------

def _lds_ptr_type(elem, align):
    return fx.PointerType.get(elem_ty=elem.ir_type, address_space=fx.AddressSpace.Shared, alignment=align)


def _lds_load_b128(addr):
    """ds_load_b128 of 4 x i32 at LDS byte address ``addr`` (i32, 16-byte aligned)."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Int32, 16), addr)
    return fx.ptr_load(ptr, ir.VectorType.get([4], fx.Int32.ir_type))


def _lds_store_b128(addr, value):
    """ds_store_b128 of a 4 x i32 vector at LDS byte address ``addr``."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Int32, 16), addr)
    fx.ptr_store(value, ptr)


def _lds_load_f32(addr):
    """ds_load_b32 of one f32 at LDS byte address ``addr``."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Float32, 4), addr)
    return fx.ptr_load(ptr)


def _concat(chunks):
    """Concatenate equal-length vectors (a power-of-two count) into one vector."""
    while len(chunks) > 1:
        n = chunks[0].numel
        chunks = [Vec(chunks[i]).shuffle(chunks[i + 1], list(range(2 * n))) for i in range(0, len(chunks), 2)]
    return Vec(chunks[0])


def _min_i32(a, b):
    return fx.Int32((a < b).select(a, b))


def _lds_load_b64(addr):
    """ds_load_b64 of 2 x i32 at LDS byte address ``addr`` (i32, 8-byte aligned)."""
    ptr = fx.inttoptr(_lds_ptr_type(fx.Int32, 8), addr)
    return fx.ptr_load(ptr, ir.VectorType.get([2], fx.Int32.ir_type))


_FX_IN = {"fp8": fx.Float8E4M3FN, "bf16": fx.BFloat16}


def _fp8_to_bf16(words):
    """The 16 e4m3 bytes of ``words`` (4 x i32) as 16 bf16, exactly, in integer arithmetic.

    Normal values keep their mantissa and move the exponent bias from 7 to 127 (``em << 4``
    plus ``120 << 7``); subnormals ``m * 2^-9`` (m = 1..7) are converted through f32, whose
    top half is then their exact bf16. (NaN bytes decode to 480.) Plain ``arith.extf`` from
    f8E4M3FN does not lower on this FlyDSL pipeline; gfx1250's ``v_cvt_scale_pk8_bf16_fp8``
    would do it in two instructions.
    """
    x = Vec(words).bitcast(fx.Int8).to(fx.Int32)
    em = x & 0x7F
    sign = (x & 0x80) << 8
    normal = (em << 4) + (120 << 7)
    sub = (em.to(fx.Float32) * (2.0 ** -9)).bitcast(fx.Int32) >> 16
    bits = (em < 8).select(sub, normal) | sign
    return bits.to(fx.Int16).bitcast(fx.BFloat16)


class RingPipeline:
    """The K pipeline pieces of one ``tile_m x tile_n`` output tile (trace-time helper).

    ``issue_stage(stage)`` issues this wave's TDM loads of k-tile ``stage`` (its row slice of
    A and of B: ``TDM_PER_WAVE`` ops) into ring slot ``stage % nb``; ``compute(slot)`` loads
    this wave's fragments of the k-tile held in ``slot`` (``ds_load``) and runs the WMMAs
    into ``acc`` (``rm * rn`` f32 accumulators of 8 values, zeroed at construction). Both are
    straight-line code: the prologue / steady / drain schedule and its synchronisations stay
    in the kernel that uses them (``gemm_kernel`` below, the grouped GEMM of
    ``kernels/mega_moe.py``), one statement per line.

    ``a_tile`` / ``b_tile`` are global iterators at row 0, column 0 of the tile (row stride
    ``K`` elements); ``a_rows`` / ``b_rows`` the rows left from there (the TDM zero-fills past
    them, and past ``K``). ``lds`` is the arena base pointer and ``lds_addr`` its i32 address;
    the ring starts at ``ring_off`` bytes. ``wave`` must be wave-uniform (``readfirstlane``).
    With ``lay.mma == "bf16"`` and FP8 B, B fragments are ``2 x ds_load_b64`` widened to bf16
    (exact: every e4m3 value is a bf16 value).
    """

    def __init__(self, lay: RingLayout, lds, lds_addr, a_tile, a_rows, b_tile, b_rows, K, wave, lane,
                 ring_off: int = 0):
        self.lay = lay
        tile_m, tile_n, tile_k, waves = lay.tile_m, lay.tile_n, lay.tile_k, lay.waves
        self.K = K
        self.ring_off = ring_off
        k64 = fx.Int64(K)
        a_t, b_t = _FX_IN[lay.a_kind], _FX_IN[lay.b_kind]
        self.gA = fx.Tensor(fx.make_view(a_tile, fx.make_layout((tile_m, tile_k), (tile_k, 1))))
        self.gB = fx.Tensor(fx.make_view(b_tile, fx.make_layout((tile_n, tile_k), (tile_k, 1))))
        # Split over all waves (each wave issues its row slice); rows padded in LDS.
        aeb, beb = lay.a_elem_bytes, lay.b_elem_bytes
        pad_a = {"pad_interval": tile_k, "pad_amount": lay.a_pad // aeb} if const_expr(lay.a_pad) else {}
        pad_b = {"pad_interval": tile_k, "pad_amount": lay.b_pad // beb} if const_expr(lay.b_pad) else {}
        self.atomA = fx.rocdl.make_tdm_atom(self.gA, [a_rows, K], strides=[k64, None], num_warps=waves, **pad_a)
        self.atomB = fx.rocdl.make_tdm_atom(self.gB, [b_rows, K], strides=[k64, None], num_warps=waves, **pad_b)
        self.lds_a = fx.recast_iter(a_t, lds)  # the arena as A / B elements (keeps its alignment)
        self.lds_b = self.lds_a if const_expr(lay.a_kind == lay.b_kind) else fx.recast_iter(b_t, lds)

        # fragments: lane l of a 16-row block reads 8-element (bf16 WMMA) or 16-byte (fp8
        # WMMA) chunks at K offset (l // 16) * chunk + 2 * chunk * j of its row
        lane16 = lane % 16
        half = lane // 16
        wave_m = wave // lay.n_waves
        wave_n = wave % lay.n_waves
        self.wave_m, self.wave_n, self.lane16, self.half = wave_m, wave_n, lane16, half
        WTM = tile_m // lay.m_waves
        WTN = tile_n // lay.n_waves
        self.chunk_a = 16 if const_expr(lay.mma == "fp8") else 8 * aeb
        self.chunk_b = 16 if const_expr(lay.mma == "fp8") else 8 * beb
        self.a_lane = [lds_addr + ring_off + (wave_m * WTM + wm * 16 + lane16) * lay.a_row + half * self.chunk_a
                       for wm in range_constexpr(lay.rm)]
        self.b_lane = [lds_addr + ring_off + lay.b_off + (wave_n * WTN + wn * 16 + lane16) * lay.b_row
                       + half * self.chunk_b for wn in range_constexpr(lay.rn)]
        self.wmma = fx.make_mma_atom(fx.rocdl.WMMA(WMMA_M, WMMA_N, lay.wmma_k, _FX_IN[lay.mma], fx.Float32))
        self.acc = [fx.make_rmem_tensor(8, fx.Float32) for _ in range_constexpr(lay.rm * lay.rn)]
        for t in self.acc:
            t.store(Vec.filled(8, 0.0, fx.Float32))

    def _ring_view(self, lds_t, eb, row, byte_off, rows):
        ptr = fx.add_offset(lds_t, byte_off // eb)
        return fx.Tensor(fx.make_view(ptr, fx.make_layout((rows, self.lay.tile_k), (row // eb, 1))))

    def issue_stage(self, stage):
        """This wave's TDM_PER_WAVE loads of k-tile ``stage`` into slot ``stage % nb``."""
        lay = self.lay
        slot_off = (stage % lay.nb) * lay.slot_bytes
        if const_expr(self.ring_off):
            slot_off = slot_off + self.ring_off
        k_left = self.K - stage * lay.tile_k  # tile-relative K extent: the TDM zero-fills past it
        a_dst = self._ring_view(self.lds_a, lay.a_elem_bytes, lay.a_row, slot_off, lay.tile_m)
        b_dst = self._ring_view(self.lds_b, lay.b_elem_bytes, lay.b_row, slot_off + lay.b_off, lay.tile_n)
        a_k = fx.Int64(stage) * (lay.tile_k * lay.a_elem_bytes)
        b_k = a_k if const_expr(lay.a_elem_bytes == lay.b_elem_bytes) else fx.Int64(stage) * (
            lay.tile_k * lay.b_elem_bytes)
        fx.copy(fx.atom_set_value(self.atomA, "extent_1", k_left), self.gA, a_dst, imm_offset=a_k)
        fx.copy(fx.atom_set_value(self.atomB, "extent_1", k_left), self.gB, b_dst, imm_offset=b_k)

    def _frag(self, addr, kind, chunk):
        lay = self.lay
        if const_expr(lay.mma == "fp8"):
            r = fx.make_rmem_tensor(16, fx.Int32)  # 64 B: 16 x i32
            r.store(_concat([_lds_load_b128(addr + 2 * chunk * j) for j in range_constexpr(4)]))
            return r
        if const_expr(kind == "bf16"):
            v = _concat([_lds_load_b128(addr + 2 * chunk * j) for j in range_constexpr(2)]).bitcast(fx.BFloat16)
        else:  # FP8 operand of a bf16 WMMA: 16 bytes, widened exactly
            v = _fp8_to_bf16(_concat([_lds_load_b64(addr + 2 * chunk * j) for j in range_constexpr(2)]))
        r = fx.make_rmem_tensor(16, fx.BFloat16)  # 32 B: 16 x bf16
        r.store(v)
        return r

    def compute(self, slot):
        """Fragments of the k-tile in ``slot`` and the WMMAs into ``acc``."""
        lay = self.lay
        base = slot * lay.slot_bytes
        for ks in range_constexpr(lay.ksteps):
            off_a = base + ks * (lay.wmma_k * lay.a_elem_bytes)
            off_b = base + ks * (lay.wmma_k * lay.b_elem_bytes)
            fa = [self._frag(self.a_lane[wm] + off_a, lay.a_kind, self.chunk_a) for wm in range_constexpr(lay.rm)]
            fb = [self._frag(self.b_lane[wn] + off_b, lay.b_kind, self.chunk_b) for wn in range_constexpr(lay.rn)]
            for wm in range_constexpr(lay.rm):
                for wn in range_constexpr(lay.rn):
                    c = self.acc[wm * lay.rn + wn]
                    fx.gemm(self.wmma, c, fb[wn], fa[wm], c)



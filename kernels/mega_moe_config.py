"""The pure-Python side of the bundled MegaMoE (`ldssan.kernels.mega_moe`): its limits, the
grouped GEMM's LDS layout, and the launcher's argument checks.

Kept apart from the kernels so `mega_moe.py` holds the device code a mutation campaign edits
(one file) and this module can be read, tested and imported without tracing anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ldssan.kernels._launch import check_tensor
from ldssan.kernels.mega_moe_reference import TOPK
from ldssan.kernels.ring_pipeline import LDS_BYTES_MAX, RingLayout, ring_layout

WAVE_SIZE = 32
WAVES = 4  # every kernel: 4 waves (128 threads); the GEMM's grid is 1 x 4 or 2 x 2 (tile_m 16 / 32)
BLOCK = WAVE_SIZE * WAVES
MAX_EXPERTS = 8
MAX_TOKENS = 64  # the route kernel gives each token one thread of its single workgroup
TILE_MS = (16, 32)  # rows of an m-tile (the expert-segment granule); wave grids 1 x 4 and 2 x 2
DEFAULTS = {"tile_m": 16, "tile_n": 128, "tile_k": 64, "nb": 3, "persistent": 4}
SCORING = ("softmax", "sigmoid")

_TORCH_W = {torch.bfloat16: "bf16", torch.float8_e4m3fn: "fp8"}


def rows_max(tokens: int, experts: int, tile_m: int = DEFAULTS["tile_m"]) -> int:
    """Rows of the expert-sorted buffers: every pair plus the worst-case padding."""
    return -(-(TOPK * tokens + experts * (tile_m - 1)) // tile_m) * tile_m


@dataclass(frozen=True)
class MoeGemmConfig:
    """One specialisation of ``moe_gemm_kernel`` (sizes in bytes unless noted)."""

    stage: int  # 1: gate/up + SiLU*mul, 2: down projection + routing weight
    K: int  # elements
    N: int  # B rows per expert (stage 1: 2I, gate/up interleaved; stage 2: D)
    ring: RingLayout
    k_tiles: int
    n_steady: int  # steady-state iterations: max(k_tiles - (nb - 1), 0)
    rowmap_off: int
    rowmap_jobs: int  # async wave-jobs of 32 words that fill the rowmap (tile_m x [dst, weight])
    tile_word_off: int
    lds_bytes: int

    @property
    def tile_m(self) -> int:
        return self.ring.tile_m


def moe_gemm_config(stage: int, K: int, N: int, b_kind: str, tile_m: int, tile_n: int, tile_k: int,
                    nb: int) -> MoeGemmConfig:
    """Validate a grouped-GEMM specialisation and derive its LDS layout (ValueError with the reason)."""
    if stage not in (1, 2):
        raise ValueError(f"mega_moe: stage must be 1 or 2, got {stage!r}")
    if tile_m not in TILE_MS:
        raise ValueError(f"mega_moe: tile_m must be one of {TILE_MS}, got {tile_m!r}")
    lay = ring_layout("bf16", b_kind, tile_m, tile_n, tile_k, WAVES, nb, m_waves=tile_m // 16, who="mega_moe")
    if stage == 1 and (tile_n // lay.n_waves) % 32:
        raise ValueError(f"mega_moe: stage 1 needs tile_n / {lay.n_waves} (one wave's columns) to be a multiple "
                         f"of 32 (gate/up block pairs), got tile_n={tile_n}")
    if K % tile_k or N % tile_n:
        raise ValueError(f"mega_moe: K={K} and N={N} must be multiples of tile_k={tile_k} and tile_n={tile_n}")
    k_tiles = K // tile_k
    rowmap_off = -(-lay.ring_bytes // 128) * 128
    tile_word_off = rowmap_off + tile_m * 8
    lds = tile_word_off + 16
    if lds > LDS_BYTES_MAX:
        raise ValueError(f"mega_moe: the tile needs {lds} B of LDS, above the gfx1250 limit of {LDS_BYTES_MAX} B")
    return MoeGemmConfig(stage=stage, K=K, N=N, ring=lay, k_tiles=k_tiles, n_steady=max(k_tiles - (nb - 1), 0),
                         rowmap_off=rowmap_off, rowmap_jobs=tile_m * 2 // WAVE_SIZE, tile_word_off=tile_word_off,
                         lds_bytes=lds)


@dataclass(frozen=True)
class MoeProblem:
    """A validated ``mega_moe`` call: its sizes and the per-channel scales to use."""

    tokens: int
    experts: int
    model_dim: int
    inter_dim: int
    b_kind: str  # "bf16" or "fp8"
    w1_scale: torch.Tensor  # (E, 2I) f32
    w2_scale: torch.Tensor  # (E, D) f32


def check_problem(x, router_logits, w1, w2, w1_scale, w2_scale, scoring, tiles: dict, out) -> MoeProblem:
    """Every argument of ``mega_moe`` checked before anything is launched (TypeError /
    ValueError naming the argument), both GEMM specialisations included."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError("mega_moe: x must be a 2-D (T, D) torch.Tensor")
    check_tensor("mega_moe", "x", x, torch.bfloat16, x.shape)
    t_, d = x.shape
    dev = x.device
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise ValueError("mega_moe: router_logits must be a 2-D (T, E) torch.Tensor")
    n_exp = router_logits.shape[1]
    check_tensor("mega_moe", "router_logits", router_logits, torch.float32, (t_, n_exp), dev)
    if not TOPK <= n_exp <= MAX_EXPERTS:
        raise ValueError(f"mega_moe: the number of experts must be in [{TOPK}, {MAX_EXPERTS}], got {n_exp}")
    if not 1 <= t_ <= MAX_TOKENS:
        raise ValueError(f"mega_moe: tokens (x.shape[0]) must be in [1, {MAX_TOKENS}], got {t_}")
    if d % 256:
        raise ValueError(f"mega_moe: model_dim (x.shape[1]) must be a multiple of 256, got {d}")
    if not isinstance(w1, torch.Tensor) or w1.dim() != 3:
        raise ValueError("mega_moe: w1 must be a 3-D (E, 2I, D) torch.Tensor")
    if w1.dtype not in _TORCH_W:
        raise TypeError(f"mega_moe: w1 dtype must be torch.bfloat16 or torch.float8_e4m3fn, got {w1.dtype}")
    b_kind = _TORCH_W[w1.dtype]
    inter = w1.shape[1] // 2
    if inter <= 0 or inter % 64:
        raise ValueError(f"mega_moe: inter_dim (w1.shape[1] / 2) must be a positive multiple of 64, got {inter}")
    check_tensor("mega_moe", "w1", w1, None, (n_exp, 2 * inter, d), dev)
    check_tensor("mega_moe", "w2", w2, w1.dtype, (n_exp, d, inter), dev)
    if scoring not in SCORING:
        raise ValueError(f"mega_moe: scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    for name, v in tiles.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"mega_moe: {name} must be a positive int, got {v!r}")
    geometry = (tiles["tile_m"], tiles["tile_n"], tiles["tile_k"], tiles["nb"])
    moe_gemm_config(1, d, 2 * inter, b_kind, *geometry)
    moe_gemm_config(2, inter, d, b_kind, *geometry)
    ones = None
    if w1_scale is None or w2_scale is None:
        ones = torch.ones(n_exp, max(2 * inter, d), dtype=torch.float32, device=dev)
    s1 = ones[:, : 2 * inter].contiguous() if w1_scale is None else w1_scale
    s2 = ones[:, :d].contiguous() if w2_scale is None else w2_scale
    check_tensor("mega_moe", "w1_scale", s1, torch.float32, (n_exp, 2 * inter), dev)
    check_tensor("mega_moe", "w2_scale", s2, torch.float32, (n_exp, d), dev)
    if out is not None:
        check_tensor("mega_moe", "out", out, torch.bfloat16, (t_, d), dev)
    return MoeProblem(t_, n_exp, d, inter, b_kind, s1, s2)


def interleave_gate_up(w: torch.Tensor) -> torch.Tensor:
    """(E, 2I, ...) gate rows then up rows -> blocks of 16 gate rows and 16 up rows alternating."""
    e, n2 = w.shape[:2]
    rest = tuple(w.shape[2:])
    return w.reshape(e, 2, n2 // 32, 16, *rest).transpose(1, 2).reshape(e, n2, *rest).contiguous()

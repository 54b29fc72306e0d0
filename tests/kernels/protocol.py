"""The protocol lines of the bundled kernels, by role, for the tests that plant bugs in them
or check that reports name them.

The lines are found by `ldssan.mutate.source.protocol_lines` (the AST finder the mutation
operators use); only the role names live here. Sync roles are listed in program order and
their count is checked, so a kernel that gains or loses a barrier breaks these tables
instead of shifting every name by one.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

from ldssan.mutate.source import protocol_lines

RMSNORM_SYNCS = ("publish_partials", "publish_total")
RMSNORM_DATA = {  # role: statement text (in _block_sum)
    "store_partial": "fx.memref_store(w_sum, partial, wave)",
    "load_partial": "p = fx.memref_load(partial, lane)",
    "store_total": "fx.memref_store(wg_sum, total, 0)",
    "load_total": "return fx.memref_load(total, 0)",
}

GEMM_SYNCS = ("steady_wait", "steady_barrier", "drain_wait", "drain_barrier", "scale_wait", "epilogue_barrier",
              "c_publish_barrier", "store_wait")
GEMM_DATA = {  # role: statement text (in gemm_kernel)
    "prologue_issue": "_issue_stage(s)",
    "scale_issue": "_scale_job(j)",
    "prefetch_issue": "_issue_stage(kt + nb - 1)",
    "steady_compute": "_compute(kt % nb)",
    "drain_compute": "_compute((n_steady + j) % nb)",
    "tdm_store": "fx.copy(atomC, c_lds, gC)",
}

MOE_ROUTE_SYNCS = ("init_barrier", "count_barrier", "reserve_barrier", "finalize_barrier")
MOE_GEMM_SYNCS = ("tile_publish_barrier", "tile_read_barrier", "steady_wait", "steady_barrier", "drain_wait",
                  "drain_barrier", "rowmap_wait", "epilogue_barrier")
MOE_DATA = {  # role: (function, statement text, occurrence)
    "count_atomic": ("moe_route_kernel", 'fx.atomic_add(_word(count, e0), fx.Int32(1), syncscope="workgroup")', 0),
    "reserve_store": ("moe_route_kernel", "fx.ptr_store(_segment_start(tid), _word(base, tid))", 0),
    "reserve_count_read": ("moe_route_kernel", "c = fx.ptr_load(_word(count, j))", 0),
    "finalize_place": ("moe_route_kernel", "_place(tok, 0, e0, w0)", 0),
    "dispatch_slot_read": ("moe_route_kernel", "row = fx.ptr_load(_word(slot, p))", 0),
    "tile_word": ("moe_gemm_kernel", "tile_word = lds_addr + cfg.tile_word_off", 0),
    "tile_store": ("moe_gemm_kernel",
                   "fx.ptr_store(fx.atomic_add(_at(COUNTER, 0), fx.Int32(1)), _lds_i32(tile_word))", 0),
    "tile_load": ("moe_gemm_kernel", "v = _uniform(fx.ptr_load(_lds_i32(tile_word)))", 0),
    "tile_fetch_first": ("moe_gemm_kernel", "_fetch_tile()", 0),
    "tile_read_first": ("moe_gemm_kernel", "tile = _read_tile()", 0),
    "tile_fetch": ("moe_gemm_kernel", "_fetch_tile()", 1),
    "prologue_issue": ("moe_gemm_kernel", "_issue_stage(s)", 0),
    "rowmap_issue": ("moe_gemm_kernel", "_rowmap_job(j, m0)", 0),
    "rowmap_copy": ("moe_gemm_kernel", "fx.rocdl.global_load_async_to_lds_b32(src.llvm_ptr, dst.llvm_ptr, 0)", 0),
    "prefetch_issue": ("moe_gemm_kernel", "_issue_stage(kt + nb - 1)", 0),
    "steady_compute": ("moe_gemm_kernel", "_compute(kt % nb)", 0),
    "drain_compute": ("moe_gemm_kernel", "_compute((n_steady + j) % nb)", 0),
    "rowmap_read": ("moe_gemm_kernel", "rows = _read_rowmap()", 0),
    "tile_read": ("moe_gemm_kernel", "nxt = _read_tile()", 0),
}


def _sites(kernel: ModuleType | str, syncs: dict[str, tuple[str, ...]],
           data: dict[str, tuple[str, str, int]]) -> dict[str, int]:
    """Role -> line: the named sync lines of each function, then each data statement."""
    p = protocol_lines(kernel)
    sites: dict[str, int] = {}
    for fn, names in syncs.items():
        sites.update(p.named_syncs(fn, names))
    sites.update({role: p.line(text, fn, nth) for role, (fn, text, nth) in data.items()})
    return sites


def _in(fn: str, data: dict[str, str]) -> dict[str, tuple[str, str, int]]:
    """A role table whose statements are all first occurrences in `fn`."""
    return {role: (fn, text, 0) for role, text in data.items()}


@cache
def rmsnorm_sites(kernel: ModuleType | str = "ldssan.kernels.rmsnorm") -> dict[str, int]:
    return _sites(kernel, {"_block_sum": RMSNORM_SYNCS}, _in("_block_sum", RMSNORM_DATA))


@cache
def gemm_sites(kernel: ModuleType | str = "ldssan.kernels.gemm") -> dict[str, int]:
    return _sites(kernel, {"gemm_kernel": GEMM_SYNCS}, _in("gemm_kernel", GEMM_DATA))


@cache
def mega_moe_sites(kernel: ModuleType | str = "ldssan.kernels.mega_moe") -> dict[str, int]:
    return _sites(kernel, {"moe_route_kernel": MOE_ROUTE_SYNCS, "moe_gemm_kernel": MOE_GEMM_SYNCS}, MOE_DATA)

"""Run-time library of the virtual gfx1250: everything generated wave code calls as `R.<name>`.

Everything here is per wave and vectorised over the wave's L lanes; masked lanes never touch
memory. The op emitters (`..ops`) only write code that calls these names; the names are
re-exported flat here so a call in generated code costs one module attribute lookup.
tests/emu/test_runtime_names.py checks that every `R.<name>` an emitter writes exists.

| module    | what                                                       |
|-----------|------------------------------------------------------------|
| lanes     | broadcast, select / merge / keep under masks, aggregates   |
| ints      | integer semantics (wrap-around, unsigned views), bit counts |
| convert   | int/float conversions, bit casts, dense constants          |
| memory    | LDS, global and buffer loads and stores                    |
| crosslane | shuffle, bpermute, DPP, swizzle, permlane, readlane, ballot |
| copies    | TDM and async copies, moved when the scheduler completes them |
| atomics   | read-modify-write and compare-exchange                     |
| wmma      | the WMMA matrix op with the gfx1250 lane layouts           |
"""

from __future__ import annotations

from .atomics import atomic_cmpxchg, atomic_rmw
from .convert import (DTYPES, amdgcn_approx, bitcast_lanes, bitcast_uniform, cvt_pk_f8, dense, erf, extsi,
                      extui, fconv,
                      flush_denormals, fptosi, fptoui, fwide, trunci, uitofp)
from .copies import AsyncCopy, TdmCopy, tdm_copy
from .crosslane import (ballot, bpermute, collapse_uniform, dpp, mbcnt, permlane, permlane_select, readfirstlane,
                        readfirstlane_groups, readlane_groups, shuffle, swizzle, transpose8)
from .ints import (ceildivsi, ceildivui, cmpf, cmpi, ctlz, ctpop, cttz, divsi, divui, floordivsi, perm, remsi,
                   remui, shli, shrsi, shrui, umax, umin)
from ..native.runs import call as native
from .lanes import fold, keep, lanes, merge, narrow, select, tuple_set
from .memory import (buffer_load, buffer_store, constant_global, global_load, global_load_uniform, global_store,
                     lds_load,
                     lds_load_uniform, lds_store,
                     make_rsrc)
from .wmma import WMMA_ELEM, wmma, wmma_f4_32x16
from .taint import (t_buffer_load, t_buffer_store, t_global_load, t_global_store, t_lds_load, t_lds_store,  # noqa: E501
                    t_wave)  # `ldssan rows` only: taint-mode code (..taint)

__all__ = [
    "AsyncCopy", "DTYPES", "amdgcn_approx", "cvt_pk_f8",
    "TdmCopy", "WMMA_ELEM", "fold", "native", "atomic_cmpxchg", "atomic_rmw", "ballot", "bitcast_lanes",
    "bitcast_uniform", "bpermute", "buffer_load", "collapse_uniform", "constant_global", "dpp", "permlane", "permlane_select",
    "swizzle", "buffer_store", "ceildivsi", "ceildivui", "cmpf", "cmpi", "ctlz", "ctpop",
    "cttz", "dense", "divsi", "divui", "erf", "extsi", "extui", "fconv", "floordivsi", "flush_denormals", "fptosi", "fptoui", "fwide",
    "global_load", "global_load_uniform", "global_store", "keep", "lanes", "lds_load", "lds_load_uniform", "lds_store", "make_rsrc",
    "mbcnt", "merge", "narrow", "perm", "readfirstlane", "readfirstlane_groups", "readlane_groups", "remsi", "remui", "select",
    "shli", "shrsi", "shrui", "shuffle", "tdm_copy", "transpose8", "trunci", "tuple_set", "uitofp", "umax", "umin", "wmma",
    "wmma_f4_32x16",
    "t_buffer_load", "t_buffer_store", "t_global_load", "t_global_store", "t_lds_load", "t_lds_store", "t_wave",
]

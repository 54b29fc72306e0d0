"""A TDM store (LDS -> global) is checked over the LDS bytes that reach global memory only:
elements of the tile box outside the tensor's bounds are dropped by the store, so LDS bytes
nobody wrote there are no uninitialized read (issue 26 #7; before: LDS030 on them). An
in-bounds element nobody wrote is still LDS030, and the store's LDS read still races."""

from __future__ import annotations

import numpy as np
import pytest

from ..emu.sanitized import sanitize_mlir
from ..emu.test_copies_wmma import tdm_desc
from ..emu.test_ops import module

PARAMS = "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>"
TILE0, TILE1, TDIM0, TDIM1 = 8, 4, 6, 3  # an 8x4 tile box over a tensor of 3 rows of 6

# Thread t writes LDS word t (tile element row t // 8, column t % 8) when it is inside the
# tensor and not `skip`; after `sync`, wave 0 stores the tile to %src (row stride 6).
STORE_KERNEL = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c8 = arith.constant 8 : i32
      %c6 = arith.constant 6 : i32
      %c3 = arith.constant 3 : i32
      %row = arith.divui %t, %c8 : i32
      %col = arith.remui %t, %c8 : i32
      %rin = arith.cmpi ult, %row, %c3 : i32
      %cin = arith.cmpi ult, %col, %c6 : i32
      %inb = arith.andi %rin, %cin : i1
      %skip = arith.constant {skip} : i32
      %keep = arith.cmpi ne, %t, %skip : i32
      %w = arith.andi %inb, %keep : i1
      scf.if %w {{
        %l = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
        llvm.store %t, %l : i32, !llvm.ptr<3>
      }}
      {sync}
      %g0 = vector.from_elements %c1, %c0, %lo, %hi : vector<4xi32>
      %c32i = arith.constant 32 : i32
      %wave0 = arith.cmpi slt, %t, %c32i : i32
      scf.if %wave0 {{
        rocdl.tensor.store.from.lds %g0, %g1, %z4, %z4, %z8, 0 : vector<4xi32>, vector<8xi32>
      }}
      rocdl.s.wait.tensorcnt 0"""


def _run(skip: int = -1, sync: str = "gpu.barrier"):
    text = module(tdm_desc(tdim0=TDIM0, tdim1=TDIM1, tile0=TILE0, tile1=TILE1, stride=TDIM0)
                  + STORE_KERNEL.format(skip=skip, sync=sync), PARAMS, 512)
    dst = np.full(64, -5, np.int32)
    report = sanitize_mlir(text, [np.zeros(64, np.int32), dst])
    return report, dst


def _codes(report):
    return sorted({v.code for v in report.violations})


def test_out_of_bounds_columns_never_written_are_not_an_uninitialized_read():
    report, dst = _run()
    assert report.clean, report.violations
    want = np.full(64, -5, np.int32)
    for r in range(TDIM1):
        for c in range(TDIM0):
            want[r * TDIM0 + c] = r * TILE0 + c
    np.testing.assert_array_equal(dst, want)  # the store moved exactly the in-bounds elements


@pytest.mark.parametrize("skip", [0, 13, 21])  # in-bounds elements (row 0 col 0, row 1 col 5, row 2 col 5)
def test_an_in_bounds_element_nobody_wrote_is_still_lds030(skip):
    report, _dst = _run(skip)
    assert _codes(report) == ["LDS030"], report.violations


def test_the_store_still_races_with_the_writes_it_reads():
    report, _dst = _run(sync="")
    # no barrier between the ds stores of wave 1 and wave 0's store: the copy overlaps them
    assert _codes(report) == ["LDS012"], report.violations

"""Forms that FlyDSL's public kernels (ROCm/FlyDSL `kernels/`: the MoE sorting and norm
kernels) use and that no other test here covers, written small and from scratch:

- LDS reached through a struct field's raw pointer (`lds.<field>.ptr`) with
  `fx.ptr_store` / `fx.ptr_load` at `ptr + fx.Int64(i)`: the emulator must honour the field's
  offset, and the sanitizer must see the accesses (the upstream MoE sorting kernels keep all
  their LDS state this way; ldssan found a real reuse race in them through this path);
- byte-granular buffer stores (`rocdl.raw.ptr.buffer.store` of an `i8` at a byte offset, under
  a divergent branch) into an int32 workspace, with the buffer's out-of-range rule.

Expected values come from numpy on the inputs, never from a run."""

import inspect  # no `from __future__ import annotations`: @fx.struct reads real field types

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl.expr import gpu
from ldssan import hook

from .test_ops import run

THREADS = 64  # two waves: the rotated read below crosses waves
ROTATE = 37


def _build(publish: bool):
    @fx.struct
    class Storage:
        head: fx.Array[fx.Int32, 5, 16]  # a first field, so `slots` does not start at 0
        slots: fx.Array[fx.Int32, THREADS, 16]

    @flyc.kernel
    def rotate_kernel(Out: fx.Tensor):
        tid = fx.thread_idx.x
        lds = fx.SharedAllocator().allocate(Storage).peek()
        head = lds.head.ptr
        slots = lds.slots.ptr
        fx.ptr_store(tid * 3 + 1, slots + fx.Int64(tid))  # <publish-store>
        if tid < 5:  # after the slot store: were the field offset lost, these would clobber it
            fx.ptr_store(fx.Int32(-1), head + fx.Int64(tid))
        if publish:
            gpu.barrier()
        Out[tid] = fx.ptr_load(slots + fx.Int64((tid + ROTATE) % THREADS))  # <rotated-read>

    @flyc.jit
    def rotate(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        rotate_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return rotate


def _line(marker: str) -> int:
    lines, first = inspect.getsourcelines(_build)
    return first + next(i for i, text in enumerate(lines) if marker in text)


@pytest.mark.parametrize("policy", ["round-robin", "reverse", "random(3)"])
def test_struct_field_raw_pointer_lds_runs_exact_and_clean(policy):
    out = torch.zeros(THREADS, dtype=torch.int32)
    with hook.sanitize(policy) as col:
        _build(publish=True)(out)
    src = (np.arange(THREADS) + ROTATE) % THREADS
    np.testing.assert_array_equal(out.numpy(), src * 3 + 1)
    assert len(col.results) == 1 and not col.violations


def test_struct_field_raw_pointer_lds_race_is_reported_at_both_lines():
    out = torch.zeros(THREADS, dtype=torch.int32)
    with hook.sanitize("round-robin") as col:
        _build(publish=False)(out)
    found = {(v.code, v.site.line, v.other_site.line) for v in col.violations}
    assert found == {("LDS001", _line("<rotated-read>"), _line("<publish-store>"))}


def test_byte_buffer_stores_land_on_their_bytes_and_respect_the_range():
    nrec = 150  # bytes in range; stores at or past it are dropped
    body = """
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c2 = arith.constant 2 : i32
      %c3 = arith.constant 3 : i32
      %stride = arith.constant 0 : i16
      %nrec = arith.constant %NREC% : i64
      %flags = arith.constant 159744 : i32
      %ro = rocdl.make.buffer.rsrc %out, %stride, %nrec, %flags : <1> to <8>
      %boff = arith.muli %t, %c3 : i32
      %v = arith.addi %t, %c1 : i32
      %b = arith.trunci %v : i32 to i8
      %par = arith.remui %t, %c2 : i32
      %even = arith.cmpi eq, %par, %c0 : i32
      scf.if %even {
        rocdl.raw.ptr.buffer.store %b, %ro, %boff, %c0, 0 : i8
      }""".replace("%NREC%", str(nrec))
    got = run(body).view(np.uint8)
    want = np.zeros(64 * 4, dtype=np.uint8)
    t = np.arange(64)
    keep = (t % 2 == 0) & (3 * t < nrec)
    want[3 * t[keep]] = t[keep] + 1
    np.testing.assert_array_equal(got, want)

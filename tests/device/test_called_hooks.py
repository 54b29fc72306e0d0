"""The virtual gfx1250's form of the device runtime: each hook defined once and called
(`link(calls=True)`), where a build for LLVM inlines every call. The emulator runs a called
body under the caller's exec mask, as the inlined body would run; both forms must write
the same records, byte for byte, and leave the same outputs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from ldssan.kernels import gemm as G
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.device import emulated
from ldssan.runtime.emu import UnsupportedOp, codegen
from ldssan.runtime.emu.launch import parse_module, run_kernel
from ldssan.variants import Edit, load_variant

# a body with a per-lane branch, a global atomic (a scheduling point) and a per-lane store
BODY = """
      %one = arith.constant 1 : i32
      %odd = arith.andi %x, %one : i32
      %is = arith.cmpi eq, %odd, %one : i32
      scf.if %is {
        %old = llvm.atomicrmw add %cnt, %k monotonic : !llvm.ptr<1>, i32
        %v = arith.addi %x, %k : i32
        %p = llvm.getelementptr %out[%x] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %v, %p : i32, !llvm.ptr<1>
      }"""


def _module(called: bool, callee: str = "ldssan_device_f") -> str:
    # the kernel runs BODY for lanes below 40 (x = lane id, k = 5): once called, once inlined
    use = (f"llvm.call @{callee}(%t, %c5, %out, %cnt) : (i32, i32, !llvm.ptr<1>, !llvm.ptr<1>) -> ()"
           if called else BODY.replace("%x", "%t").replace("%k", "%c5"))
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    llvm.func @{callee}(%x: i32, %k: i32, %out: !llvm.ptr<1>, %cnt: !llvm.ptr<1>) {{
{BODY}
      llvm.return
    }}
    gpu.func @kern(%out: !llvm.ptr<1>, %cnt: !llvm.ptr<1>) kernel {{
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
      %c5 = arith.constant 5 : i32
      %c40 = arith.constant 40 : i32
      %lo = arith.cmpi slt, %t, %c40 : i32
      scf.if %lo {{
        {use}
      }}
      gpu.return
    }}
  }}
}}"""


def _run(text: str, policy: str = "round-robin"):
    out, cnt = np.zeros(64, np.int32), np.zeros(1, np.int32)
    run_kernel(parse_module(text), "kern", grid=(1, 1, 1), block=(64, 1, 1), args=[out, cnt], policy=policy)
    return out, cnt


@pytest.mark.parametrize("policy", ["round-robin", "reverse"])
def test_a_called_body_runs_under_the_callers_mask_as_the_inlined_one(policy):
    out, cnt = _run(_module(called=True), policy)
    lane = np.arange(64)
    ran = (lane < 40) & (lane % 2 == 1)
    np.testing.assert_array_equal(out, np.where(ran, lane + 5, 0))
    assert cnt[0] == 5 * ran.sum()
    ref_out, ref_cnt = _run(_module(called=False), policy)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(cnt, ref_cnt)


def test_a_call_of_a_users_function_is_refused_naming_it():
    with pytest.raises(UnsupportedOp, match=r"call to @user_f"):
        _run(_module(called=True, callee="user_f"))


def _bug(edit_from: str, edit_to: str | None, tag: str):
    line = [i + 1 for i, ln in enumerate(open(R.__file__).read().splitlines()) if ln.strip() == edit_from][0]
    return load_variant(R, [Edit(line, edit_to)], tag=tag)


def _device_run(mod, call, **kw):
    codegen.clear_cache()
    with emulated(**kw) as run:
        out = call(mod)
    # the form that ran: called hooks are generators the kernel's code `yield from`s
    sources = [p.source for p in codegen._CACHE.values() if not p.name.startswith("_")]
    assert sources and all(("yield from F" in s) != kw.get("inline", False) for s in sources)
    # the launch id counts the process's launches: the rest of each record must be equal
    return [replace(r, launch=0).pack() for r in run.ring().records()], out


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def _rms(mod):
    gen = torch.Generator().manual_seed(11)
    x, g = torch.randn(2, 512, generator=gen), torch.randn(512, generator=gen)
    return mod.rmsnorm(x, g)


@pytest.mark.parametrize("scratch", [False, True])
def test_called_and_inlined_hooks_write_the_same_records_rmsnorm(scratch):
    mod = _bug("fx.memref_store(w_sum, partial, wave)", "fx.memref_store(w_sum, partial, 0)", "called_waw")
    called, out = _device_run(mod, _rms, policy="random(4)", scratch=scratch)
    inlined, ref = _device_run(mod, _rms, policy="random(4)", scratch=scratch, inline=True)
    assert called, "the planted bug must be reported"
    assert called == inlined
    assert _bits(out) == _bits(ref)  # bit for bit (NaNs included)


@pytest.mark.slow  # the inlined GEMM takes ~1 minute to parse and translate
def test_called_and_inlined_hooks_write_the_same_records_gemm_copies():
    line = [i + 1 for i, ln in enumerate(open(G.__file__).read().splitlines())
            if ln.strip() == "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2))"][0]
    mod = load_variant(G, [Edit(line, "tdm_ops.tensor_wait(TDM_PER_WAVE * (nb - 2) + 1)")], tag="called_gemm")

    def call(m):
        gen = torch.Generator().manual_seed(3)
        a = torch.randn(64, 512, generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(64, 512, generator=gen).to(torch.float8_e4m3fn)
        return m.gemm(a, b, waves=4, nb=3)

    called, out = _device_run(mod, call)
    inlined, ref = _device_run(mod, call, inline=True)
    assert called and called == inlined
    assert _bits(out) == _bits(ref)  # bit for bit (NaNs included)

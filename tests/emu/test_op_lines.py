"""Ops built through FlyDSL's raw MLIR builders (`fx.arith.ceildivui`, the dialect modules'
functions, `memref.get_global` inside the legacy SmemAllocator) carry the line that built them,
not the kernel's `def` line, so a refusal points at the op (issue 26 #6)."""

import inspect  # no `from __future__ import annotations`: FlyDSL reads the kernel's annotations

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import arith as raw_arith
from flydsl._mlir.dialects import memref as raw_memref
from flydsl.compiler.kernel_function import CompilationContext
from flydsl.utils.smem_allocator import SmemAllocator, SmemPtr
from ldssan.runtime.emu import UnsupportedOp, emulate

THREADS = 64
pytestmark = pytest.mark.filterwarnings("ignore:SmemAllocator is the legacy")


def _ceildiv_kernel():
    @flyc.kernel
    def ceildiv_kernel(Out: fx.Tensor):
        tid = fx.thread_idx.x
        q = raw_arith.ceildivui(fx.Int32(tid).ir_value(), fx.Int32(3).ir_value())  # <ceildivui>
        Out[tid] = fx.Int32(q)

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        ceildiv_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def _legacy_smem_kernel():
    alloc = SmemAllocator(None, arch="gfx1250", global_sym_name="legacy_smem")
    alloc.ptr = THREADS * 4

    @flyc.kernel
    def legacy_smem_kernel(Out: fx.Tensor):
        tid = fx.thread_idx.x
        with ir.InsertionPoint(CompilationContext.get_current().gpu_module_body):
            alloc.finalized = False
            alloc.finalize()
        base = alloc.get_base()  # <get_global>
        slots = SmemPtr(base, 0, ir.IntegerType.get_signless(32), shape=(THREADS,))
        slots.store(fx.Int32(tid).ir_value(), [fx.Index(tid).ir_value()])
        Out[tid] = fx.Int32(tid)

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        legacy_smem_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def _device_variable_kernel():
    @flyc.kernel
    def device_variable_kernel(Out: fx.Tensor):
        tid = fx.thread_idx.x
        i32 = ir.IntegerType.get_signless(32)
        counters = ir.MemRefType.get([4], i32)
        with ir.InsertionPoint(CompilationContext.get_current().gpu_module_body):
            raw_memref.global_(sym_name="counters", type_=counters, sym_visibility="private")
        var = raw_memref.get_global(counters, "counters")  # <device_variable>
        Out[tid] = fx.Int32(raw_memref.load(var, [fx.Index(0).ir_value()]))

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        device_variable_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def _line(builder, marker: str) -> int:
    lines, first = inspect.getsourcelines(builder)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def test_a_raw_arith_builder_runs_exact():
    out = torch.zeros(THREADS, dtype=torch.int32)
    with emulate():
        _ceildiv_kernel()(out)
    np.testing.assert_array_equal(out.numpy(), -(-np.arange(THREADS) // 3))


def test_a_refusal_names_the_ops_own_line_not_the_def_line():
    # a mutable global-memory variable (its value would outlive the launch): refused at get_global
    out = torch.zeros(THREADS, dtype=torch.int32)
    with pytest.raises(UnsupportedOp) as info, emulate():
        _device_variable_kernel()(out)
    path = inspect.getsourcefile(_device_variable_kernel)
    assert info.value.op_name == "memref.get_global"
    assert f"{path}:{_line(_device_variable_kernel, '<device_variable>')}:" in str(info.value), str(info.value)
    assert "mutable global" in str(info.value)


@pytest.mark.parametrize("mode", ["emulate", "sanitize"])
def test_the_legacy_smem_allocator_runs_and_is_checked(mode):
    import ldssan

    out = torch.zeros(THREADS, dtype=torch.int32)
    with (emulate() if mode == "emulate" else ldssan.sanitize()) as ctx:
        _legacy_smem_kernel()(out)
    np.testing.assert_array_equal(out.numpy(), np.arange(THREADS))
    if mode == "sanitize":
        (launch,) = ctx.results
        assert launch.report.clean, launch.report.violations
        assert [launch.sites[i].kind for i in launch.sites].count("ds_write") == 1


def test_the_raw_builders_op_carries_its_line_into_the_ir(monkeypatch):
    # the location itself, without relying on a refusal: the ceildivui op's own line
    from ldssan.runtime.emu import codegen

    seen = []
    original = codegen.Translator.op

    def spy(self, op):
        if op.name == "arith.ceildivui":
            seen.append(str(op.loc))
        return original(self, op)

    monkeypatch.setattr(codegen.Translator, "op", spy)
    codegen.clear_cache()  # translate again, through the spy
    with emulate():
        _ceildiv_kernel()(torch.zeros(THREADS, dtype=torch.int32))
    assert seen and all(f":{_line(_ceildiv_kernel, '<ceildivui>')}:" in loc for loc in seen), seen


def _intrinsic_kernel(name: str):
    from flydsl._mlir.dialects import llvm as raw_llvm

    @flyc.kernel
    def intrinsic_kernel(Out: fx.Tensor):
        tid = fx.thread_idx.x
        fx.rocdl.disable_xdl_arb_stall()
        i32 = ir.IntegerType.get_signless(32)
        v = raw_llvm.call_intrinsic(i32, name, [fx.Int32(tid).ir_value(), fx.Int32(0x0A0B0C0D).ir_value(),  # <intr>
                                                fx.Int32(0x0C0C0004).ir_value()], [], [])
        Out[tid] = fx.Int32(v)

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        intrinsic_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def test_flydsl_perm_and_the_arbitration_stall_write_run_exact():
    out = torch.zeros(THREADS, dtype=torch.int32)
    with emulate():
        _intrinsic_kernel("llvm.amdgcn.perm")(out)
    # selector 0x0c0c0004: byte 0 = byte 4 (S0's low byte: tid), byte 1 = byte 0 (S1's: 0x0d), then 0, 0
    np.testing.assert_array_equal(out.numpy(), (np.arange(THREADS) & 0xFF) | 0x0D00)


def test_an_unknown_intrinsic_is_refused_at_its_own_line():
    out = torch.zeros(THREADS, dtype=torch.int32)
    with pytest.raises(UnsupportedOp) as info, emulate():
        _intrinsic_kernel("llvm.amdgcn.not.modelled")(out)
    path = inspect.getsourcefile(_intrinsic_kernel)
    assert 'llvm.call_intrinsic "llvm.amdgcn.not.modelled"' in str(info.value)
    assert f"{path}:{_line(_intrinsic_kernel, '<intr>')}:" in str(info.value), str(info.value)


def test_builders_called_by_ldssans_own_pass_keep_the_location_they_run_under():
    # outside a FlyDSL trace the wrappers do nothing: the hook calls the instrumentation pass
    # builds carry the instrumented op's line, not the pass's own Python line
    from flydsl.compiler.jit_function import _create_mlir_context

    from ldssan.passes.instrument import Instrumenter
    from ldssan.runtime.emu import frontend

    from .test_ops import module

    frontend.install_locations()
    text = module("""
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %p = llvm.getelementptr %base[%t] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      llvm.store %t, %p : i32, !llvm.ptr<3> loc("k.py":5:3)""")
    with _create_mlir_context():
        mod = ir.Module.parse(text)
        Instrumenter(mod.operation).run()
        printed = mod.operation.get_asm(enable_debug_info=True)
    hook_lines = [ln for ln in printed.splitlines() if "@__ldssan_ds" in ln and "llvm.call" in ln]
    assert hook_lines, printed
    assert "instrument.py" not in printed and "locations.py" not in printed


def _asm_kernel(text: str):
    from flydsl._mlir.dialects import llvm as raw_llvm

    @flyc.kernel
    def asm_kernel(Out: fx.Tensor):
        tid = fx.thread_idx.x
        i32 = ir.IntegerType.get_signless(32)
        v = raw_llvm.inline_asm(i32, [fx.Int32(tid).ir_value()], text, "=s,s,~{scc}", has_side_effects=True)  # <asm>
        Out[tid] = fx.Int32(v)

    @flyc.jit
    def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        asm_kernel(Out).launch(grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    return launch


def test_inline_asm_from_the_table_runs_and_others_are_refused_at_their_own_line():
    out = torch.zeros(THREADS, dtype=torch.int32)
    with emulate():
        _asm_kernel("s_and_b32 $0, $1, 1")(out)
    np.testing.assert_array_equal(out.numpy(), np.arange(THREADS) & 1)
    with pytest.raises(UnsupportedOp) as info, emulate():
        _asm_kernel("s_or_b32 $0, $1, 1")(out)
    path = inspect.getsourcefile(_asm_kernel)
    assert 'llvm.inline_asm "s_or_b32 $0, $1, 1"' in str(info.value)
    assert f"{path}:{_line(_asm_kernel, '<asm>')}:" in str(info.value), str(info.value)

"""The linker in the install path: a compile-only build of the bundled RMSNorm reaches a
linked gfx1250 code object and its ISA with a line table, with no ROCm on the machine."""

from __future__ import annotations

import inspect
import shlex
import struct

import pytest
import torch

from ldssan.isa.asm import parse_kernel, with_offsets
from ldssan.isa.capture import EM_AMDGPU, capture_builds, elf_machine
from ldssan.isa.check import check_build
from ldssan.isa.toolchain import check_linker, linker_root, rocm_root
from ldssan.runtime.zig import zig_command
from ldssan.kernels import rmsnorm as rms

EF_AMDGPU_MACH_AMDGCN_GFX1250 = 0x49


def test_the_install_provides_a_working_ld_lld(monkeypatch):
    monkeypatch.delenv("ROCM_PATH", raising=False)
    assert check_linker(rocm_root()).startswith("LLD ")
    # the shim starts zig itself, no child interpreter (its start-up, with a sitecustomize
    # that imports much, cost seconds per link)
    shim = (linker_root() / "llvm" / "bin" / "ld.lld").read_text()
    assert zig_command() == (zig_command()[0],) and shim.split("\n")[1].startswith(f"exec {shlex.quote(zig_command()[0])} ld.lld")


@pytest.fixture(scope="module")
def rmsnorm_build():
    x, g = torch.randn(2, 512).to(torch.bfloat16), torch.randn(512).to(torch.bfloat16)
    (build,) = capture_builds(rms.rmsnorm, x, g)
    return build


def test_rmsnorm_builds_to_a_gfx1250_code_object(rmsnorm_build):
    elf = rmsnorm_build.elf
    assert elf_machine(elf) == EM_AMDGPU
    (e_flags,) = struct.unpack_from("<I", elf, 0x30)
    assert e_flags & 0xFF == EF_AMDGPU_MACH_AMDGCN_GFX1250


def test_rmsnorm_isa_has_the_reduction_with_source_lines_and_exact_offsets(rmsnorm_build):
    kernel, note = with_offsets(parse_kernel(rmsnorm_build.isa, rmsnorm_build.kernel), rmsnorm_build.elf)
    assert note is None  # the re-assembled size equals the kernel symbol's size in the ELF
    src_file = inspect.getsourcefile(rms)
    stores = [i for i in kernel.instrs if i.mnemonic.startswith("ds_store")]
    signals = [i for i in kernel.instrs if i.mnemonic == "s_barrier_signal"]
    src = open(src_file).read().splitlines()
    # the two LDS stores of _block_sum (partial[wave], total[0]) and its two barriers
    assert len(stores) == 2 and len(signals) == 2
    assert all(i.file == src_file for i in stores + signals)
    assert ["memref_store" in src[i.line - 1] for i in stores] == [True, True]
    assert ["fx.gpu.barrier()" in src[i.line - 1] for i in signals] == [True, True]
    assert [i.offset for i in kernel.instrs] == sorted({i.offset for i in kernel.instrs})


def test_clean_rmsnorm_has_no_isa_finding(rmsnorm_build):
    result = check_build(rmsnorm_build, offsets=False)
    assert result.findings == ()

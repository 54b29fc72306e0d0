"""Every argument form FlyDSL 0.5.0's `@flyc.jit` launch accepts, run on the virtual gfx1250
the way the kernel's author calls it: plain torch tensors (FlyDSL's default dynamic layout),
`from_torch_tensor` / `from_dlpack` with static or dynamic layouts, `from_c_void_p` pointers
and integer addresses, scalars of every width, constexprs and `@fx.struct` values.

Expected values are computed from the inputs with torch, never copied from a run."""

import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from ldssan.runtime.emu import EmuMemoryError, emulate
from ldssan.runtime.emu.hostargs import EmuLaunchError, host_arguments
from ldssan.runtime.emu.launch import parse_module
from ldssan.runtime.emu.memory import PROCESS_TENSORS

ROWS, COLS = 3, 64


@flyc.kernel
def _add_one(A: fx.Tensor, Out: fx.Tensor):
    row = fx.block_idx.x
    col = fx.thread_idx.x
    Out[row, col] = A[row, col] + 1


@flyc.jit
def add_one(A: fx.Tensor, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _add_one(A, Out).launch(grid=(ROWS, 1, 1), block=(COLS, 1, 1), stream=stream)


def _strided(fill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A (ROWS, COLS) column window of a wider buffer: row stride 80, not COLS, so a kernel
    that ignored the runtime stride would read and write the wrong elements."""
    base = torch.full((ROWS, COLS + 16), fill, dtype=torch.int32)
    return base, base[:, 8:8 + COLS]


WRAPS = {
    "plain torch tensor (default dynamic layout)": lambda t: t,
    "from_torch_tensor (static)": flyc.from_torch_tensor,
    "from_torch_tensor + mark_layout_dynamic": lambda t: flyc.from_torch_tensor(t).mark_layout_dynamic(),
    "from_torch_tensor + mark_shape_dynamic": lambda t: flyc.from_torch_tensor(t).mark_shape_dynamic(0),
    "from_torch_tensor + mark_stride_dynamic": lambda t: flyc.from_torch_tensor(t).mark_stride_dynamic(0),
    "dynamic layout, 32-bit strides": lambda t: flyc.from_torch_tensor(
        t, use_32bit_stride=True).mark_layout_dynamic(),
    "from_dlpack (static)": flyc.from_dlpack,
    "from_dlpack + mark_layout_dynamic": lambda t: flyc.from_dlpack(t).mark_layout_dynamic(),
}


@pytest.mark.parametrize("form", list(WRAPS))
def test_tensor_forms_read_and_write_through_their_runtime_layout(form):
    src_base, src = _strided(0)
    src.copy_(torch.arange(ROWS * COLS, dtype=torch.int32).reshape(ROWS, COLS) * 3)
    out_base, out = _strided(-7)
    wrap = WRAPS[form]
    with emulate():
        add_one(wrap(src), wrap(out))
    torch.testing.assert_close(out, src + 1)
    # the padding columns around the window are not part of the tensor: untouched
    assert (out_base[:, :8] == -7).all() and (out_base[:, 8 + COLS:] == -7).all()
    assert (src_base[:, :8] == 0).all()


@flyc.kernel
def _gather(A: fx.Pointer, Out: fx.Tensor):
    tid = fx.thread_idx.x
    Out[tid] = (A + tid).load(fx.Int32) * 2


@flyc.jit
def gather(A: fx.Pointer, Out: fx.Tensor):
    _gather(A, Out).launch(grid=(1, 1, 1), block=(COLS, 1, 1))


def _pointer(form: str, t: torch.Tensor, offset_elems: int):
    addr = t.data_ptr() + offset_elems * t.element_size()
    if form == "c_void_p":
        return flyc.from_c_void_p(fx.Int32, ctypes.c_void_p(addr))
    return flyc.from_c_void_p(fx.Int32, addr)


@pytest.mark.parametrize("form", ["integer address", "c_void_p"])
@pytest.mark.parametrize("offset", [0, 16])
def test_pointer_into_a_live_tensor_that_is_not_an_argument(form, offset):
    # `src` reaches the launch only as an address: it is found among the process's tensors
    src = torch.arange(COLS + 16, dtype=torch.int32) * 5 - 40
    out = torch.zeros(COLS, dtype=torch.int32)
    with emulate():
        gather(_pointer(form, src, offset), out)
    torch.testing.assert_close(out, src[offset:offset + COLS] * 2)


def test_pointer_into_memory_of_no_tensor_is_an_error_naming_the_argument():
    foreign = np.arange(COLS, dtype=np.int32)  # host memory, but no torch tensor owns it
    out = torch.zeros(COLS, dtype=torch.int32)
    with emulate(), pytest.raises(EmuMemoryError, match=r"argument 'A' is the address 0x[0-9a-f]+, which is "
                                                         r"in no live CPU torch tensor"):
        gather(flyc.from_c_void_p(fx.Int32, foreign.ctypes.data), out)
    assert (out == 0).all()  # refused before any wave ran


@flyc.kernel
def _shifted(A: fx.Tensor, Out: fx.Tensor):
    tid = fx.thread_idx.x
    Out[tid] = A[tid + COLS]  # one row past the end of A


@flyc.jit
def shifted(A: fx.Tensor, Out: fx.Tensor):
    _shifted(A, Out).launch(grid=(1, 1, 1), block=(COLS, 1, 1))


def test_a_launch_of_tensors_only_cannot_reach_other_live_tensors():
    # no raw address in the launch: an access past its tensors is an error even if the
    # bytes there belong to some other live tensor of the process (the message says which
    # memory the launch may reach)
    a, out = torch.arange(COLS, dtype=torch.int32), torch.zeros(COLS, dtype=torch.int32)
    with emulate(), pytest.raises(EmuMemoryError, match="outside every tensor of the launch"):
        shifted(a, out)


def test_process_tensors_resolve_addresses_inside_live_cpu_storages_only():
    t = torch.arange(100, dtype=torch.float32)
    view = t[10:20]
    base, size, what = PROCESS_TENSORS.storage_at(view.data_ptr() + 4, 8)
    assert (base, size) == (t.data_ptr(), 400) and "live torch.float32 CPU tensor" in what
    assert PROCESS_TENSORS.storage_at(t.data_ptr() + 396, 8) is None  # straddles the end
    assert PROCESS_TENSORS.storage_at(np.zeros(4).ctypes.data, 4) is None


@flyc.kernel
def _scalars(Ints: fx.Tensor, Floats: fx.Tensor, a: fx.Int32, w: fx.Int64, flag: fx.Boolean,
             b: fx.Float32, h: fx.Float16, bf: fx.BFloat16, c: fx.Constexpr[int]):
    tid = fx.thread_idx.x
    Ints[tid] = fx.Int64(a) * fx.Int64(tid) + w + fx.Int64(c)
    Floats[tid] = fx.Float32(h) + fx.Float32(bf) * fx.Float32(tid) + b
    if flag:
        Ints[tid] = -Ints[tid]


@flyc.jit
def scalars(Ints: fx.Tensor, Floats: fx.Tensor, a: fx.Int32, w: fx.Int64, flag: fx.Boolean,
            b: fx.Float32, h: fx.Float16, bf: fx.BFloat16, c: fx.Constexpr[int]):
    _scalars(Ints, Floats, a, w, flag, b, h, bf, c).launch(grid=(1, 1, 1), block=(COLS, 1, 1))


@pytest.mark.parametrize("flag", [False, True])
def test_scalar_and_constexpr_arguments_of_every_width(flag):
    # w needs all 64 bits; h and bf arrive from FlyDSL as 16-bit patterns in a c_short
    a, w, b, h, bf, c = -3, (1 << 40) + 5, 0.5, 1.5, -2.0, 7
    ints = torch.zeros(COLS, dtype=torch.int64)
    floats = torch.zeros(COLS, dtype=torch.float32)
    with emulate():
        scalars(ints, floats, a, w, flag, b, h, bf, c)
    tid = torch.arange(COLS, dtype=torch.int64)
    want = a * tid + w + c
    torch.testing.assert_close(ints, -want if flag else want)
    torch.testing.assert_close(floats, h + bf * tid.float() + b)


@fx.struct
class Inner:
    x: fx.Int32
    y: fx.Int32


@fx.struct
class Outer:
    head: fx.Int32
    inner: Inner
    scale: fx.Float32
    rows: fx.Constexpr[int]


@flyc.kernel
def _structs(Out: fx.Tensor, p: Outer):
    tid = fx.thread_idx.x
    Out[tid] = fx.Float32(p.head + p.inner.x * tid - p.inner.y) * p.scale + fx.Float32(p.rows)


@flyc.jit
def structs(Out: fx.Tensor, p: Outer):
    _structs(Out, p).launch(grid=(1, 1, 1), block=(COLS, 1, 1))


def test_nested_struct_argument_with_a_constexpr_field():
    out = torch.zeros(COLS, dtype=torch.float32)
    with emulate():
        structs(out, Outer(head=11, inner=Inner(x=3, y=4), scale=0.25, rows=2))
    tid = torch.arange(COLS, dtype=torch.float32)
    torch.testing.assert_close(out, (11 + 3 * tid - 4) * 0.25 + 2)


HOST = """
module attributes {gpu.container_module} {
  func.func @launch(%a: !llvm.struct<(i8, i32, f16)>, %b: !llvm.struct<packed (i8, i32)>, %c: i1) {
    return
  }
}
"""


def test_host_arguments_follow_natural_and_packed_struct_layouts():
    view = parse_module(HOST)
    natural = bytes([9, 0, 0, 0]) + (-5).to_bytes(4, "little", signed=True) + np.float16(0.75).tobytes() + b"\0\0"
    packed = bytes([200]) + (70000).to_bytes(4, "little")
    a, b, c = host_arguments(view, "launch", [natural, packed, b"\x01"], ["'a'", "'b'", "'c'"])
    assert a == (9, -5, 0.75) and a[2].dtype == np.float16
    assert b == (-56, 70000)  # i8 200 reads back signed
    assert c is np.True_


def test_host_argument_of_an_unexpected_size_is_an_error_naming_it():
    view = parse_module(HOST)
    with pytest.raises(EmuLaunchError, match=r"argument 'b': FlyDSL packed 6 bytes for a parameter of type"):
        host_arguments(view, "launch", [bytes(12), bytes(6), b"\x00"], ["'a'", "'b'", "'c'"])


@flyc.kernel
def _leaves_barrier(Out: fx.Tensor):
    tid = fx.thread_idx.x
    Out[tid] = fx.Int32(tid)
    fx.rocdl.s_barrier_leave(0)  # an op the virtual gfx1250 does not implement


@flyc.jit
def leaves_barrier(Out: fx.Tensor):
    _leaves_barrier(Out).launch(grid=(1, 1, 1), block=(COLS, 1, 1))


def test_plain_emulation_names_the_raw_rocdl_op_line_not_the_def_line():
    # FlyDSL gives raw ROCDL builder ops the kernel's `def` line unless ldssan wraps them
    source = Path(__file__).read_text().splitlines()
    op_line = 1 + next(i for i, text in enumerate(source) if "fx.rocdl.s_barrier_leave(0)" in text)
    with emulate(), pytest.raises(NotImplementedError,
                                  match=rf"'rocdl.s.barrier.leave' at .*test_launch_args.py:{op_line}:"):
        leaves_barrier(torch.zeros(COLS, dtype=torch.int32))

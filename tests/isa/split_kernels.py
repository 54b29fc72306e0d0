"""Two tiny gfx1250 kernels for the ISA check: LDS stores published by a raw split barrier
with no fence (aiter #6344's shape) and the same kernel with the release wait. Each
`launch_*` builds one kernel; `ldssan isa-check tests/isa/split_kernels.py::launch_raw`."""

import torch

import flydsl.compiler as flyc
import flydsl.expr as fx

N = 64  # two waves


@flyc.kernel
def raw_split(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10  # STORE
    fx.rocdl.s_barrier_signal(-1)  # SIGNAL
    fx.rocdl.s_barrier_wait(-1)
    fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Acquire)
    Out[tid] = lds[(tid + 1) % N]


@flyc.kernel
def waited_split(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10
    fx.rocdl.s_wait_dscnt(0)
    fx.rocdl.s_barrier_signal(-1)
    fx.rocdl.s_barrier_wait(-1)
    fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Acquire)
    Out[tid] = lds[(tid + 1) % N]


@flyc.jit
def _raw(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    raw_split(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def _waited(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    waited_split(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def launch_raw():
    _raw(torch.zeros(N, dtype=torch.int32))


def launch_waited():
    _waited(torch.zeros(N, dtype=torch.int32))


def line_of(tag: str) -> int:
    """The line of this file whose comment is `# TAG`."""
    with open(__file__) as fh:
        return next(n for n, s in enumerate(fh, 1) if s.rstrip().endswith(f"# {tag}"))


def launch_nothing():
    """Builds no kernel (the CLI says so)."""

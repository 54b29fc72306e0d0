"""Glue for the coop tests: building a one-workgroup kernel around a FlyDSL cooperative
primitive, launching it sanitized on the virtual gfx1250 under several scheduler policies,
and checking each launch against a host reference.

The kernels use `flydsl.extension.coop` (installed with flydsl, not our code) the way
FlyDSL's own coop tests do: the primitive's `SharedStorage` from `fx.SharedAllocator`,
per-thread items read from global memory in blocked order, results written back.
"""

from __future__ import annotations

from pathlib import Path

import torch

import flydsl.compiler as flyc
import flydsl.expr as fx

from ldssan import hook
from ldssan.report import render_text

# Three orders that interleave the waves differently; each one is also a different
# schedule for the primitive's LDS traffic, so a missing barrier inside it would show.
POLICIES = ("round-robin", "reverse", "random(3)")

# FlyDSL element type -> torch dtype, for the types the sweeps cover.
TORCH_OF = {
    fx.Uint8: torch.uint8,
    fx.Int16: torch.int16,
    fx.Int32: torch.int32,
    fx.Int64: torch.int64,
    fx.Float32: torch.float32,
    fx.Float64: torch.float64,
}


def type_id(dtype) -> str:
    return dtype.__name__


def sample(dtype, n: int, *, seed: int, low: int = -64, high: int = 64) -> torch.Tensor:
    """`n` values of `dtype`. Floats are small multiples of 1/8, so sums and prefixes are
    exact in any association order and the reference can be compared bit for bit."""
    gen = torch.Generator().manual_seed(seed)
    tdt = TORCH_OF[dtype]
    if tdt.is_floating_point:
        return (torch.randint(low, high, (n,), generator=gen) / 8).to(tdt)
    if not tdt.is_signed:
        low, high = max(low, 0), min(high, torch.iinfo(tdt).max + 1)
    return torch.randint(low, high, (n,), generator=gen, dtype=tdt)


def wrap(values: torch.Tensor, tdt: torch.dtype) -> torch.Tensor:
    """Fold int64 host arithmetic back to `tdt`'s width, as the device's integers wrap."""
    if tdt.is_floating_point or tdt == torch.int64:
        return values.to(tdt)
    bits = 8 * torch.empty((), dtype=tdt).element_size()
    folded = values.to(torch.int64) % (1 << bits)
    if tdt.is_signed:
        folded = torch.where(folded >= 1 << (bits - 1), folded - (1 << bits), folded)
    return folded.to(tdt)


def to_striped(tile: torch.Tensor, threads: int, items: int) -> torch.Tensor:
    """A blocked tile as `threads` threads hold it in striped order (thread t, item i has
    position t + i*threads), laid out thread after thread; tiles of several groups are
    converted group by group."""
    return tile.reshape(-1, items, threads).transpose(1, 2).reshape(-1)


def read_blocked(tensor, tid, items: int, dtype=None):
    """This thread's `items` consecutive elements of a blocked tile, as a list; converted to
    `dtype` when given (a torch.uint8 tensor reads as Int8, and the primitives check the
    element type they were specialized for)."""
    return [tensor[tid * items + i] if dtype is None else dtype(tensor[tid * items + i])
            for i in range(items)]


def write_blocked(tensor, tid, items: int, values, *, base: int = 0) -> None:
    """Store `values` (a list, a Vector of `items`, or one element) as this thread's
    consecutive elements of the tile starting at element `base`."""
    if items == 1 and not isinstance(values, (list, tuple)):
        values = [values]
    for i in range(items):
        tensor[base + tid * items + i] = values[i]


def block_launcher(block: int, body):
    """A host launcher for one workgroup of `block` threads whose kernel runs
    `body(tid, A, B, OutA, OutB)` (unused tensors are simply not touched)."""

    @flyc.kernel(known_block_size=[block, 1, 1])
    def kernel(A: fx.Tensor, B: fx.Tensor, OutA: fx.Tensor, OutB: fx.Tensor):
        body(fx.thread_idx.x, A, B, OutA, OutB)

    @flyc.jit
    def launch(A: fx.Tensor, B: fx.Tensor, OutA: fx.Tensor, OutB: fx.Tensor,
               stream: fx.Stream = fx.Stream(None)):
        kernel(A, B, OutA, OutB).launch(grid=(1, 1, 1), block=(block, 1, 1), stream=stream)

    return launch


def _poisoned(like: torch.Tensor) -> torch.Tensor:
    """A fresh output filled with a value no check expects (NaN, or the type's maximum), so
    an element the kernel never wrote cannot pass for a right answer."""
    fill = float("nan") if like.is_floating_point() else torch.iinfo(like.dtype).max
    return torch.full_like(like, fill)


def run_sanitized(launch, inputs, outputs, policy: str):
    """One sanitized launch on fresh, poisoned copies of `outputs` (up to two inputs and two
    outputs; a missing one is a dummy tensor the body ignores); returns (outputs, report)."""
    dummy = torch.zeros(1, dtype=torch.int32)
    a, b = (list(inputs) + [dummy, dummy])[:2]
    outs = [_poisoned(o) for o in outputs]
    oa, ob = (outs + [dummy, dummy])[:2]
    with hook.sanitize(policy) as col:
        launch(a, b, oa, ob)
    assert len(col.results) == 1, f"expected one sanitized launch, got {len(col.results)}"
    return outs, col.results[0].report


def check_clean(launch, inputs, outputs, expect, policies=POLICIES) -> None:
    """Under every policy: zero violations, nothing dropped, and `expect(outs)` holds."""
    for policy in policies:
        outs, report = run_sanitized(launch, inputs, outputs, policy)
        assert not report.violations and not report.dropped, (
            f"policy {policy}:\n{render_text(report)}")
        expect(outs, policy)


def assert_equal(got: torch.Tensor, want: torch.Tensor, policy: str) -> None:
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert torch.equal(got, want), f"policy {policy}: got {got.tolist()}\nwant {want.tolist()}"


def line_of(path: str, marker: str) -> int:
    """The line of `path` ending with the comment `marker`, so a test that checks a
    report's source lines follows edits of its kernel."""
    lines = Path(path).read_text().splitlines()
    found = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(marker)]
    assert len(found) == 1, (path, marker, found)
    return found[0]

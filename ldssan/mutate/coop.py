"""Campaign cases for FlyDSL's cooperative primitives (`flydsl.extension.coop`, installed
with flydsl): `ldssan mutate flydsl.extension.coop.block.reduce` and the rest of `COOP`.

A primitive module is mutated like a kernel file (its relative imports made absolute,
`target.package_edits`); each case builds a one-workgroup kernel of its own around the
primitive taken from *the given module* (the mutant), launches it on fixed inputs and
compares every output element exactly with a host reference. The kernel is built once per
variant; its JIT launcher is the case's `jit_functions` (the primitive module has none of
its own to compare IR by). Inputs are small integers, so every association order gives
the same bits.

Only what the module itself defines is mutated: `BlockRadixSort` calls the original
`radix_rank`, so a module is listed here only with a case that calls it directly.
"""

# No `from __future__ import annotations`: FlyDSL reads the kernels' annotations as objects.
from types import ModuleType
from typing import Callable

from .target import Case, register_cases

PACKAGE = "flydsl.extension.coop"
_LAUNCHERS: dict[tuple[str, str], object] = {}


def _launcher(block: int, body):
    """One workgroup of `block` threads running `body(tid, A, B, OutA, OutB)`."""
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    @flyc.kernel(known_block_size=[block, 1, 1])
    def kernel(A: fx.Tensor, B: fx.Tensor, OutA: fx.Tensor, OutB: fx.Tensor):
        body(fx.thread_idx.x, A, B, OutA, OutB)

    @flyc.jit
    def launch(A: fx.Tensor, B: fx.Tensor, OutA: fx.Tensor, OutB: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
        kernel(A, B, OutA, OutB).launch(grid=(1, 1, 1), block=(block, 1, 1), stream=stream)

    return launch


def _case(name: str, block: int, make_body: Callable[[ModuleType], Callable], inputs, wants) -> Case:
    """A case: the kernel `make_body(module)` over `inputs` (up to two tensors); `wants` the
    exact expected outputs (up to two). Outputs start poisoned, so an element the kernel
    never writes cannot pass."""
    import torch

    def launcher(mod: ModuleType):
        key = (name, mod.__name__)
        if key not in _LAUNCHERS:
            _LAUNCHERS[key] = _launcher(block, make_body(mod))
        return _LAUNCHERS[key]

    def run(mod: ModuleType):
        dummy = torch.zeros(1, dtype=torch.int32)
        a, b = (list(inputs) + [dummy, dummy])[:2]
        outs = [torch.full_like(w, torch.iinfo(w.dtype).max) for w in wants]
        oa, ob = (outs + [dummy, dummy])[:2]
        launcher(mod)(a, b, oa, ob)
        return outs

    def check(outs) -> bool:
        return all(torch.equal(o, w) for o, w in zip(outs, wants))

    return Case(name, run=run, check=check, jit_functions=lambda mod: {"launch": launcher(mod)})


def _sample(n: int, seed: int, low: int = -64, high: int = 64):
    import torch

    return torch.randint(low, high, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _read(tensor, tid, items: int, dtype):
    return [dtype(tensor[tid * items + i]) for i in range(items)]


def _write(tensor, tid, items: int, values, base: int = 0) -> None:
    if items == 1 and not isinstance(values, (list, tuple)):
        values = [values]
    for i in range(items):
        tensor[base + tid * items + i] = values[i]


def _striped(tile, threads: int, items: int):
    return tile.reshape(-1, items, threads).transpose(1, 2).reshape(-1)


_FACTORIES: dict[str, Callable[[], list[Case]]] = {}


def _coop(module: str):
    def register(fn):
        _FACTORIES[f"{PACKAGE}.{module}"] = fn
        register_cases(f"{PACKAGE}.{module}", fn)
        return fn

    return register


def _algorithms(enum_name: str) -> list[str]:
    """The distinct members of a coop algorithm enum (aliases such as `Raking` skipped)."""
    import flydsl.extension.coop as coop

    return [a.name for a in getattr(coop, enum_name)]


@_coop("block.reduce")
def _reduce_cases() -> list[Case]:
    import torch

    import flydsl.expr as fx

    block = 128
    x = _sample(block, 1)
    want = x.to(torch.int64).sum().to(torch.int32).expand(block).clone()

    def body_of(algo):
        def make(mod):
            def body(tid, A, _B, Out, _OB):
                reduce = mod.BlockReduce[fx.Int32, block, getattr(mod.BlockReduceAlgorithm, algo)]
                storage = fx.SharedAllocator().allocate(reduce.SharedStorage).peek()
                Out[tid] = reduce(fx.Int32(A[tid]), fx.ReductionOp.ADD, storage=storage)
            return body
        return make

    return [_case(f"sum-{block}-{a}", block, body_of(a), [x], [want]) for a in _algorithms("BlockReduceAlgorithm")]


@_coop("block.scan")
def _scan_cases() -> list[Case]:
    import torch

    import flydsl.expr as fx

    block, items, init = 128, 2, 5
    x = _sample(block * items, 2)
    inclusive = x.to(torch.int64).cumsum(0)
    exclusive = torch.cat([inclusive.new_zeros(1), inclusive[:-1]]) + init
    wants = [inclusive.to(torch.int32), exclusive.to(torch.int32)]

    def body_of(algo):
        def make(mod):
            def body(tid, A, _B, Inc, Exc):
                scan = mod.BlockScan[fx.Int32, block, getattr(mod.BlockScanAlgorithm, algo)]
                storage = fx.SharedAllocator().allocate(scan.SharedStorage).peek()
                tile = _read(A, tid, items, fx.Int32)
                _write(Inc, tid, items, scan.inclusive(tile, fx.ReductionOp.ADD, storage=storage))
                fx.barrier()  # the docs' barrier between two collectives on one storage
                _write(Exc, tid, items, scan.exclusive(tile, fx.ReductionOp.ADD, storage=storage,
                                                       init=fx.Int32(init)))
            return body
        return make

    return [_case(f"scan-{block}x{items}-{a}", block, body_of(a), [x], wants) for a in _algorithms("BlockScanAlgorithm")]


@_coop("block.exchange")
def _exchange_cases() -> list[Case]:
    import flydsl.expr as fx

    block, items = 64, 3
    x = _sample(block * items, 3)

    def body_of(algo):
        def make(mod):
            def body(tid, A, _B, Out, Back):
                ex = mod.BlockExchange[fx.Int32, block, items, getattr(mod.BlockExchangeAlgorithm, algo)]
                storage = fx.SharedAllocator().allocate(ex.SharedStorage).peek()
                striped = ex.blocked_to_striped(_read(A, tid, items, fx.Int32), storage=storage)
                fx.barrier()
                _write(Out, tid, items, striped)
                _write(Back, tid, items, ex.striped_to_blocked(striped, storage=storage))
            return body
        return make

    return [_case(f"exchange-{block}x{items}-{a}", block, body_of(a), [x], [_striped(x, block, items), x.clone()])
            for a in _algorithms("BlockExchangeAlgorithm")]


@_coop("block.histogram")
def _histogram_cases() -> list[Case]:
    import torch

    import flydsl.expr as fx

    block, items, bins = 64, 2, 16
    x = _sample(block * items, 4, low=-2, high=bins + 2)
    wide = x.to(torch.int64)
    counts = torch.bincount(wide[(wide >= 0) & (wide < bins)], minlength=bins).to(torch.int32)

    def body_of(algo):
        def make(mod):
            def body(tid, A, _B, Once, Twice):
                hist = mod.BlockHistogram[fx.Int32, block, bins, getattr(mod.BlockHistogramAlgorithm, algo)]
                storage = fx.SharedAllocator().allocate(hist.SharedStorage).peek()
                v = _read(A, tid, items, fx.Int32)
                got = hist(v, storage=storage)
                Once[tid % bins] = got[tid % bins]
                fx.barrier()
                hist.composite(v, storage=storage)
                fx.barrier()
                Twice[tid % bins] = storage.counts[tid % bins]
            return body
        return make

    return [_case(f"histogram-{block}x{items}-{bins}-{a}", block, body_of(a), [x], [counts, 2 * counts])
            for a in _algorithms("BlockHistogramAlgorithm")]


def _sort_cases(primitive: str, enum_name: str, block: int, items: int, descending: bool, seed: int) -> list[Case]:
    import torch

    import flydsl.expr as fx

    n = block * items
    keys = _sample(n, seed, low=-20, high=20)
    order = torch.sort(keys, stable=True, descending=descending).indices
    wants = [keys[order], order.to(torch.int32)]

    def body_of(algo):
        def make(mod):
            def body(tid, Keys, Vals, OutKeys, OutVals):
                sort = getattr(mod, primitive)[(fx.Int32, fx.Int32), block, items, getattr(getattr(mod, enum_name), algo)]
                storage = fx.SharedAllocator().allocate(sort.SharedStorage).peek()
                out_keys, out_vals = sort(_read(Keys, tid, items, fx.Int32), [Vals[tid * items + i] for i in range(items)],
                                          storage=storage, descending=descending)
                _write(OutKeys, tid, items, out_keys)
                _write(OutVals, tid, items, out_vals)
            return body
        return make

    positions = torch.arange(n, dtype=torch.int32)
    return [_case(f"{primitive}-{block}x{items}-{a}", block, body_of(a), [keys, positions], wants)
            for a in _algorithms(enum_name)]


@_coop("block.radix_sort")
def _radix_sort_cases() -> list[Case]:
    return _sort_cases("BlockRadixSort", "BlockRadixSortAlgorithm", 64, 2, False, 5)


@_coop("block.merge_sort")
def _merge_sort_cases() -> list[Case]:
    return _sort_cases("BlockMergeSort", "BlockMergeSortAlgorithm", 64, 3, True, 6)


@_coop("warp.reduce")
def _warp_reduce_cases() -> list[Case]:
    return _warp_cases("reduce")


@_coop("warp.scan")
def _warp_scan_cases() -> list[Case]:
    return _warp_cases("scan")


def _warp_cases(kind: str) -> list[Case]:
    """The universal (undispatched) warp primitives with `valid_items`, the path the
    mutants reach: a sum over each logical warp's first `valid` lanes (reduce), or an
    inclusive prefix sum over them (scan; lanes past `valid` are unspecified, written 0)."""
    import torch

    import flydsl.expr as fx

    block = 64
    x = _sample(block, 7)
    cases = []
    for width, valid in ((32, 23), (8, 5)):
        groups = x.to(torch.int64).reshape(-1, width)[:, :valid]
        if kind == "reduce":
            want = groups.sum(1).reshape(-1, 1).expand(-1, width).reshape(-1).to(torch.int32)
        else:
            want = torch.zeros(block // width, width, dtype=torch.int64)
            want[:, :valid] = groups.cumsum(1)
            want = want.reshape(-1).to(torch.int32)

        def make(mod, width=width, valid=valid):
            def body(tid, A, _B, Out, _OB):
                v = fx.Int32(A[tid])
                if kind == "reduce":
                    Out[tid] = mod.warp_sum(v, width=width, valid_items=valid)
                else:
                    s = mod.warp_inclusive_sum(v, width=width, valid_items=valid)
                    Out[tid] = ((tid % width) < valid).select(s, fx.Int32(0))
            return body

        cases.append(_case(f"warp-{kind}-w{width}-valid{valid}", block, make, [x], [want]))
    return cases


COOP: tuple[str, ...] = tuple(_FACTORIES)

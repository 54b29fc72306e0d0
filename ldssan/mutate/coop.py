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

from ldssan.passes.ir.caches import register_cache
from .target import Case, register_cases

PACKAGE = "flydsl.extension.coop"
_LAUNCHERS: dict[tuple[str, str], object] = register_cache({})


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


def _stable_ranks(keys, descending: bool = False):
    """Each element's position in a stable sort of `keys`."""
    import torch

    order = torch.sort(keys, stable=True, descending=descending).indices
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(keys.numel())
    return ranks.to(torch.int32)


@_coop("block.radix_rank")
def _radix_rank_cases() -> list[Case]:
    """Stable ranks of 4-bit digits under the MATCH policies, which consume warp-striped
    input: thread (w, l) item i holds element w*32*items + i*32 + l of the logical sequence,
    and its rank is written back there. BASIC and MEMOIZE are left out: their clean code has
    every thread store the same bin offset to one LDS word with no barrier between
    (`storage.prefix[digit] = offset`), an LDS003 the baseline gate refuses."""
    import flydsl.expr as fx

    block, items, bits = 64, 2, 4
    keys = _sample(block * items, 8, low=0, high=1 << bits)

    def index(tid, i):
        return (tid // 32) * 32 * items + i * 32 + tid % 32

    cases = []
    for algo in [a for a in _algorithms("BlockRadixRankAlgorithm") if a.startswith("MATCH")]:
        def make(mod, algo=algo):
            def body(tid, Keys, _B, Ranks, _OB):
                rank = mod.BlockRadixRank[fx.Int32, block, items, getattr(mod.BlockRadixRankAlgorithm, algo)]
                storage = fx.SharedAllocator().allocate(rank.SharedStorage).peek()
                got = rank([fx.Int32(Keys[index(tid, i)]) for i in range(items)], storage=storage,
                           begin_bit=0, end_bit=bits)
                for i in range(items):
                    Ranks[index(tid, i)] = got[i]
            return body

        cases.append(_case(f"radix-rank-{block}x{items}-{algo}", block, make, [keys], [_stable_ranks(keys)]))
    # two 4-bit digit passes over 8-bit keys: the multi-pass path (publish, inverse) runs too
    wide = _sample(block * items, 14, low=0, high=1 << (2 * bits))

    def two_pass(mod):
        def body(tid, Keys, _B, Ranks, _OB):
            rank = mod.BlockRadixRank[fx.Int32, block, items, mod.BlockRadixRankAlgorithm.MATCH]
            storage = fx.SharedAllocator().allocate(rank.SharedStorage).peek()
            got = rank([fx.Int32(Keys[index(tid, i)]) for i in range(items)], storage=storage,
                       begin_bit=0, end_bit=2 * bits, radix_bits=bits)
            for i in range(items):
                Ranks[index(tid, i)] = got[i]
        return body

    cases.append(_case(f"radix-rank-{block}x{items}-MATCH-2pass", block, two_pass, [wide], [_stable_ranks(wide)]))
    return cases


@_coop("block.topk")
def _topk_cases() -> list[Case]:
    """The k largest of distinct keys in the first k blocked slots (MERGE: in descending
    order; AIR: in input order); slots past k must report invalid and are written -1."""
    import torch

    import flydsl.expr as fx

    block, items, k = 64, 2, 37
    keys = torch.randperm(block * items, generator=torch.Generator().manual_seed(9)).to(torch.int32) - 40
    top = torch.topk(keys, k).indices
    chosen = {"MERGE": keys[top], "AIR": keys[top.sort().values]}
    cases = []
    for algo in _algorithms("BlockTopKAlgorithm"):
        want = torch.full_like(keys, -1)
        want[:k] = chosen[algo]
        valid = (torch.arange(keys.numel()) < k).to(torch.int32)

        def make(mod, algo=algo):
            def body(tid, Keys, _B, Out, Valid):
                topk = mod.BlockTopK[fx.Int32, block, items, getattr(mod.BlockTopKAlgorithm, algo)]
                storage = fx.SharedAllocator().allocate(topk.SharedStorage).peek()
                y, ok = topk(_read(Keys, tid, items, fx.Int32), k, storage=storage, largest=True)
                for i in range(items):
                    Out[tid * items + i] = (ok[i] != 0).select(y[i], fx.Int32(-1))
                    Valid[tid * items + i] = fx.Int32(ok[i] != 0)
            return body

        cases.append(_case(f"topk-{block}x{items}-k{k}-{algo}", block, make, [keys], [want, valid]))
    return cases


@_coop("block.shuffle")
def _shuffle_cases() -> list[Case]:
    """`up` (shift by one item toward higher positions, `predecessor` enters at 0) and
    `down` (toward lower, `successor` enters at the end) of one blocked tile."""
    import torch

    import flydsl.expr as fx

    block, items, pred, succ = 64, 2, -100, 100
    x = _sample(block * items, 10)
    up = torch.cat([torch.tensor([pred], dtype=torch.int32), x[:-1]])
    down = torch.cat([x[1:], torch.tensor([succ], dtype=torch.int32)])

    def make(mod):
        def body(tid, A, _B, Up, Down):
            shuffle = mod.BlockShuffle[fx.Int32, block, mod.BlockShuffleAlgorithm.SHARED_MEMORY]
            storage = fx.SharedAllocator().allocate(shuffle.SharedStorage).peek()
            tile = _read(A, tid, items, fx.Int32)
            _write(Up, tid, items, shuffle.up(tile, storage=storage, predecessor=fx.Int32(pred)))
            fx.barrier()
            _write(Down, tid, items, shuffle.down(tile, storage=storage, successor=fx.Int32(succ)))
        return body

    return [_case(f"shuffle-{block}x{items}-up-down", block, make, [x], [up, down])]


@_coop("block.run_length_decode")
def _run_length_decode_cases() -> list[Case]:
    """One run per thread (lengths 0..3, some empty), decoded into the first `block*window`
    items: each item's run value and its offset inside the run; items past the total get
    `default` and relative offset -1."""
    import torch

    import flydsl.expr as fx

    block, window, default = 64, 2, -9
    values = _sample(block, 11)
    lengths = _sample(block, 12, low=0, high=3)
    decoded = torch.repeat_interleave(values, lengths.to(torch.int64))
    relative = torch.cat([torch.arange(int(n), dtype=torch.int32) for n in lengths])
    n = block * window
    want_y = torch.full((n,), default, dtype=torch.int32)
    want_rel = torch.full((n,), -1, dtype=torch.int32)
    want_y[:min(n, decoded.numel())] = decoded[:n]
    want_rel[:min(n, relative.numel())] = relative[:n]

    def make(mod):
        def body(tid, Values, Lengths, Y, Rel):
            decode = mod.BlockRunLengthDecode[fx.Int32, block, 1, mod.BlockRunLengthDecodeAlgorithm.SCAN]
            storage = fx.SharedAllocator().allocate(decode.SharedStorage).peek()
            y, rel, _total = decode([fx.Int32(Values[tid])], [fx.Int32(Lengths[tid])], storage=storage,
                                    decoded_items_per_thread=window, default=fx.Int32(default))
            _write(Y, tid, window, y)
            _write(Rel, tid, window, rel)
        return body

    return [_case(f"run-length-decode-{block}-w{window}", block, make, [values, lengths], [want_y, want_rel])]


@_coop("warp.exchange")
def _warp_exchange_cases() -> list[Case]:
    """Eight logical warps of 8 lanes, each with its own SharedStorage: blocked -> striped
    within the logical warp, then back. (SHUFFLE moves registers only and is not cased.)"""
    import flydsl.expr as fx

    block, width, items = 64, 8, 2
    x = _sample(block * items, 13)

    def make(mod):
        def body(tid, A, _B, Out, Back):
            ex = mod.WarpExchange[fx.Int32, width, items, mod.WarpExchangeAlgorithm.SHARED]
            scratch = fx.SharedAllocator().allocate(fx.Array[ex.SharedStorage, block // width]).peek()
            storage = scratch[tid // width]
            striped = ex.blocked_to_striped(_read(A, tid, items, fx.Int32), storage=storage)
            fx.barrier()
            _write(Out, tid, items, striped)
            _write(Back, tid, items, ex.striped_to_blocked(striped, storage=storage))
        return body

    return [_case(f"warp-exchange-{block}-w{width}x{items}-SHARED", block, make, [x], [_striped(x, width, items), x.clone()])]


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

"""Launching on the virtual gfx1250: the host launcher, LDS layout, workgroup batches.

FlyDSL's own host function (`func.func @<jit name>`) is translated like a kernel (one lane)
and run with the packed argument values: grid, block, dynamic LDS, layout come from FlyDSL. Its `gpu.launch_func` lands in `Launcher.launch_kernel`.

Argument values are decoded from the bytes FlyDSL's own fills wrote into its ctypes slots,
read as the host function's parameter types (one slot per parameter): a dynamic-layout
tensor's shape/stride slot is a byte buffer holding a packed `!llvm.struct`, an f16/bf16
scalar a `c_short` bit pattern. Pointer parameters must point into tensor memory the
launch can prove (see `memory.py`); any other address is an error naming the argument.

Cluster launches (`gpu.launch_func ... clusters in (cx, cy, cz)`, FlyDSL's
`launch(cluster=...)`): the grid is tiled by clusters of cx*cy*cz workgroups (at most 16,
the width of the multicast mask; every grid dim a multiple of its cluster dim: partial
clusters are refused). A cluster's workgroups are always resident together, interleaved by
the scheduler, so that cluster barriers (`s_barrier_signal/wait -3`) can complete and TDM
multicast reaches their LDS (`multicast.bind`); `resident=N` runs N // (cluster size)
clusters at once (at least one); no batching. Each wave knows its cluster: `cdim` (cluster
dims), `cid` (cluster id in the grid = workgroup id // cdim), `cwg` (workgroup id within the
cluster = workgroup id % cdim), `cluster` (which cluster of the run, None outside one);
outside a cluster launch a workgroup is its own cluster of one (`cwg` = 0).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from ldssan.passes.ir.caches import register_cache
from . import multicast, taint as _taint
from .codegen import Program, translate, translate_lockstep
from .errors import EmuLaunchError
from ldssan.passes.ir.irview import ModuleView, walk
from .memory import EmuMemoryError, GlobalMemory, LocalMemory
from .sched import BatchDivergence, Policy, Scheduler
from ldssan.passes.ir.types import Type, byte_size
from .grid import chunks, cluster_groups, place_in_cluster, threads_of, workgroups
from .limits import Limits
from .wave import WAVE, Budget, LockstepCtx, LockstepHooks, WaveCtx

LDS_LIMIT = 327680  # gfx1250 addressable LDS per workgroup
# auto limits (limits.py): per 1024 threads of a scheduler run (one batch / resident chunk),
# loop iterations; per 1024 threads of a launch, CPU seconds of emulation
STEP_BUDGET = 50_000_000
TIME_LIMIT = 10.0
LDS_FILL = 0xFF  # fresh LDS reads as NaN / -1: uninitialised data is visible to output checks
MAX_CLUSTER = 16  # workgroups per cluster: the TDM / cluster-load workgroup mask has 16 bits

# `batch=AUTO`: lockstep launches put as many workgroups on the lane axis as fit these
# budgets (per-wave launches run one workgroup at a time). Every value of a lockstep run is
# an array over its lanes, so the lane count bounds the memory of a chunk; throughput stops
# growing past ~16K lanes (RMSNorm and GEMM sweeps: benchmarks/scaling.py) while memory does not.
AUTO = 0
LANE_BUDGET = 16384
LDS_BUDGET = 64 << 20  # bytes of LDS of one chunk's workgroups


def batch_option(value: "int | str") -> int:
    """`batch` as given by a user ("auto" or a positive int) -> AUTO or that int."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"batch must be 'auto' or an integer >= 1, got {value!r}")
    return value


def auto_batch(n_groups: int, n_waves: int, lds_bytes: int) -> int:
    """Workgroups per lockstep chunk under `batch=AUTO`: within the lane and LDS budgets."""
    by_lanes = LANE_BUDGET // (WAVE * max(1, n_waves))
    by_lds = LDS_BUDGET // max(1, lds_bytes)
    return max(1, min(n_groups, by_lanes, by_lds))


def lds_layout(view: ModuleView, dynamic_bytes: int = 0) -> tuple[dict[str, int], int]:
    """Offsets of the module's LDS globals, in declaration order, and the total size."""
    offsets: dict[str, int] = {}
    cur = 0
    dynamic: list[str] = []
    for g in view.globals.values():
        if g.addr_space != 3:
            continue
        size = byte_size(g.type)
        if size == 0:
            dynamic.append(g.name)
            continue
        align = max(1, g.alignment)
        cur = (cur + align - 1) // align * align
        offsets[g.name] = cur
        cur += size
    cur = (cur + 15) // 16 * 16
    for name in dynamic:
        offsets[name] = cur
    return offsets, cur + dynamic_bytes


def cluster_dims(name: str, grid: tuple[int, int, int], cluster) -> tuple[int, int, int] | None:
    """The checked cluster dims of a launch of @name, or None for a launch without clusters."""
    if cluster is None:
        return None
    dims = tuple(int(c) for c in cluster)
    size = dims[0] * dims[1] * dims[2]
    if min(dims) <= 0 or size > MAX_CLUSTER:
        raise EmuLaunchError(f"ldssan-emu: @{name}: cluster dims {dims} — a gfx1250 cluster holds 1 to "
                             f"{MAX_CLUSTER} workgroups")
    if any(g % c for g, c in zip(grid, dims)):
        raise EmuLaunchError(f"ldssan-emu: @{name}: grid {grid} is not a whole number of clusters {dims} "
                             "(every grid dim must be a multiple of its cluster dim)")
    return dims


def host_arguments(view: ModuleView, host: str, raws: list[bytes], names: list[str]) -> list:
    """The host function's argument values, decoded from the raw bytes of FlyDSL's slots."""
    fn = view.functions.get(host)
    if fn is None or not fn.body:
        raise EmuLaunchError(f"ldssan-emu: the module has no host function @{host}")
    types = fn.body[0].arg_types
    if len(types) != len(raws):
        raise EmuLaunchError(
            f"ldssan-emu: @{host} takes {len(types)} parameters but FlyDSL packed {len(raws)} argument "
            f"slots ({', '.join(names)}); this argument form is not supported: please report")
    return [_decode_slot(t, raw, name) for t, raw, name in zip(types, raws, names)]


def _decode_slot(t: Type, raw: bytes, name: str):
    if t.kind == "other":
        if t.name == "!gpu.async.token":
            return np.int64(int.from_bytes(raw, "little"))  # the stream: unused here
        raise EmuLaunchError(f"ldssan-emu: argument {name}: cannot pass a value of type {t} to the virtual gfx1250")
    try:
        # The MLIR type as parsed does not say `packed`; the slot's size does: a natural
        # layout with padding is larger than the packed one; without padding both agree.
        if len(raw) == _layout(t, packed=True)[0]:
            packed = True
        elif len(raw) == _layout(t, packed=False)[0]:
            packed = False
        else:
            raise EmuLaunchError(
                f"ldssan-emu: argument {name}: FlyDSL packed {len(raw)} bytes for a parameter of type {t} "
                f"({byte_size(t)} bytes); this argument form is not supported: please report")
        return _decode(t, raw, 0, packed=packed)
    except TypeError as exc:  # a member type with no host representation (byte_size / dtype_of)
        raise EmuLaunchError(f"ldssan-emu: argument {name}: cannot pass a value of type {t} to the "
                             f"virtual gfx1250 ({exc}): please report") from exc


def _align(t: Type) -> int:
    if t.kind == "struct":
        return max((_align(f) for f in t.fields), default=1)
    if t.kind == "array":
        return _align(t.elem)
    n = byte_size(t)
    return 1 << (n - 1).bit_length()  # scalars: their size; vectors: size rounded to a power of 2


def _layout(t: Type, *, packed: bool) -> tuple[int, list[int]]:
    """(size, member offsets) of a struct/array as LLVM lays it out; (size, []) for scalars."""
    members = t.fields if t.kind == "struct" else (t.elem,) * t.count if t.kind == "array" else None
    if members is None:
        return byte_size(t), []
    cur, offs = 0, []
    for m in members:
        if not packed:
            a = _align(m)
            cur = (cur + a - 1) // a * a
        offs.append(cur)
        cur += _layout(m, packed=packed)[0]
    if not packed:
        a = _align(t)
        cur = (cur + a - 1) // a * a
    return cur, offs


def _decode(t: Type, raw: bytes, at: int, *, packed: bool):
    if t.kind in ("struct", "array"):
        members = t.fields if t.kind == "struct" else (t.elem,) * t.count
        _size, offs = _layout(t, packed=packed)
        return tuple(_decode(m, raw, at + o, packed=packed) for m, o in zip(members, offs))
    if t.kind == "vector":
        return np.frombuffer(raw, dtype=t.dtype, count=t.count, offset=at).copy()
    if t.kind == "int" and t.width == 1:
        return np.bool_(raw[at] != 0)
    return np.frombuffer(raw, dtype=t.dtype, count=1, offset=at)[0]


def _pointer_leaves(t: Type, value, name: str):
    """(name, address) of every global pointer inside an argument value."""
    if t.kind == "ptr" and t.width in (0, 1):
        yield name, int(value)
    elif t.kind in ("struct", "array"):
        members = t.fields if t.kind == "struct" else (t.elem,) * t.count
        for i, (m, v) in enumerate(zip(members, value)):
            yield from _pointer_leaves(m, v, f"{name}.{i}")


def bind_pointers(gmem: GlobalMemory, view: ModuleView, host: str, values: list, names: list[str]) -> None:
    """Check every pointer argument against the launch's memory; resolve raw addresses.

    A pointer outside the argument tensors (`from_c_void_p`, an integer address) is looked
    up among the process's live CPU tensors and that storage joins the launch; one found
    nowhere is an error naming the argument, never a read of unknown host memory. A launch
    with raw-address arguments, or whose kernels build global pointers from integers
    (`llvm.inttoptr`), may reach every live tensor; others only their argument tensors."""
    raw = False
    for t, v, name in zip(view.functions[host].body[0].arg_types, values, names):
        for leaf, addr in _pointer_leaves(t, v, name):
            if addr == 0 or gmem.find(addr) is not None:
                continue
            if gmem.add_process_tensor(addr, 1, f"argument {leaf}") is None:
                raise EmuMemoryError(
                    f"ldssan-emu: argument {leaf} is the address 0x{addr:x}, which is in no live CPU torch "
                    "tensor of this process; the virtual gfx1250 reaches only tensor memory (pass the "
                    "tensor itself, or keep the tensor alive across the launch)")
            raw = True
    gmem.reach_process = raw or builds_global_pointers(view)


def builds_global_pointers(view: ModuleView) -> bool:
    """Whether a kernel of the module turns integers into global pointers (cached per view)."""
    got = _BUILDS_POINTERS.get(id(view))
    if got is None or got[0] is not view:
        found = any(op.name == "llvm.inttoptr" and op.result_types[0].kind == "ptr"
                    and op.result_types[0].width in (0, 1)
                    for fn in view.functions.values() if fn.is_kernel for op in walk(fn.body))
        got = _BUILDS_POINTERS[id(view)] = (view, found)
    return got[1]


_BUILDS_POINTERS: dict[int, tuple[ModuleView, bool]] = register_cache({})


@dataclass
class LaunchRecord:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    lds_bytes: int
    policy: str
    seconds: float = 0.0
    wave_steps: int = 0
    wave_ops: int = 0  # ops executed per wave, summed over waves (a wave-op covers 32 lanes per workgroup)
    lane_ops: int = 0
    batch: int = 1
    stats: dict = field(default_factory=dict)
    cluster: tuple[int, int, int] | None = None  # cluster dims of a cluster launch


class Launcher:
    """Runs the launches of one host call against `gmem`."""

    def __init__(self, view: ModuleView, gmem: GlobalMemory, *, policy: Policy, batch: int = 1,
                 ir_key: str = "", sanitizer=None, resident: int = 1, time_limit: float | None = None,
                 step_budget: int | None = None):
        self.view = view
        self.gmem = gmem
        self.policy = policy
        self.batch = AUTO if batch == AUTO else max(1, batch)
        # CPU seconds per launch / loop iterations per scheduler run (None: auto, limits.py)
        self.limits = Limits(time_limit, step_budget)
        self._clock = None  # the current launch's (seconds, CPU-time deadline, name): _start_clock
        # workgroups resident at once, interleaved by the scheduler (persistent kernels,
        # cross-workgroup flags); exclusive with batching
        self.resident = max(1, resident)
        self.ir_key = ir_key
        self.sanitizer = sanitizer  # object with .begin_batch(...) -> per-wave hooks, or None
        self.records: list[LaunchRecord] = []
        self._policy = policy.per_wave  # the policy the current launch runs under

    def _key(self, name: str) -> str | None:
        # no content hash -> no caching (a stale translation must never run)
        return f"{self.ir_key}:{name}" if self.ir_key else None

    def run_host(self, host_name: str, values: list) -> None:
        prog = translate(self.view, host_name, cache_key=self._key(f"host:{host_name}"))
        ctx = HostCtx(self)
        gen = prog.wave_fn(ctx, tuple(values))
        try:
            for _ in gen:
                raise RuntimeError("ldssan-emu: the host launcher yielded (barrier or wait on the host?)")
        except Exception as exc:  # fail closed: an ldssan error naming the host op (a kernel's own error passes)
            err = prog.failure(exc, "the host launcher")
            if err is exc:
                raise
            raise err from exc

    def launch_kernel(self, name: str, grid, block, smem: int, args: tuple, cluster=None) -> None:
        grid = tuple(int(x) for x in grid)
        block = tuple(int(x) for x in block)
        fn = self.view.functions.get(name)
        if fn is None or not fn.is_kernel:
            raise RuntimeError(f"ldssan-emu: gpu.launch_func names @{name}, which is not a kernel of the module")
        n_threads = block[0] * block[1] * block[2]
        if n_threads <= 0 or n_threads > 1024 or min(grid) <= 0:
            raise ValueError(f"ldssan-emu: bad launch geometry grid={grid} block={block} for @{name}")
        smem = int(smem)
        if smem < 0:  # would shift every dynamic LDS byte: a bogus LDS031 and wrong data
            raise EmuLaunchError(f"ldssan-emu: @{name}: dynamic LDS size smem={smem} bytes is negative")
        offsets, lds_bytes = lds_layout(self.view, smem)
        if lds_bytes > LDS_LIMIT:
            raise ValueError(f"ldssan-emu: @{name} needs {lds_bytes} bytes of LDS; gfx1250 has {LDS_LIMIT}")
        dims = cluster_dims(name, grid, cluster)
        n_groups = grid[0] * grid[1] * grid[2]
        self._start_clock(name, grid, block, n_threads * n_groups)
        batch = self.batch or auto_batch(n_groups, (n_threads + WAVE - 1) // WAVE, lds_bytes)
        batch_refusal = None
        lockstep, refusal = self._lockstep_program(name, dims, batch > 1)
        if lockstep is None and batch > 1 and self.batch == AUTO and self.policy.lockstep and dims is None:
            # not across workgroups (a while loop, an atomic-steered protocol): each
            # workgroup in lockstep still may, interleaved with the others
            batch_refusal = refusal
            lockstep, refusal = self._lockstep_program(name, dims, False)
            batch = 1
        if lockstep is None and self.batch == AUTO:
            batch = 1  # per-wave runs batch only when asked (they re-run a chunk on divergence)
        if lockstep is not None and 1 < batch < n_groups and self.resident > 1:
            # workgroups asked to be resident together share a batch: one of them may wait on
            # another, which only runs beside it in the same batch (uniformity.lockstep_refusal)
            batch = max(self.resident, batch - batch % self.resident)
        # a batched lockstep run needs no resident workgroups: its workgroups run side by side
        resident = self.resident if lockstep is None or batch == 1 else 1
        self._policy = self.policy if lockstep is not None else self.policy.per_wave
        rec = self._current = LaunchRecord(name, grid, block, lds_bytes, str(self._policy), cluster=dims)
        if refusal:
            rec.stats["lockstep_refused"] = refusal
        if batch_refusal:
            rec.stats["lockstep_batch_refused"] = batch_refusal
        t0 = time.perf_counter()
        if dims is not None:
            clusters = cluster_groups(grid, dims)
            per_run = max(1, self.resident // (dims[0] * dims[1] * dims[2]))
            for part in chunks(clusters, per_run):
                rec.wave_steps += self._run_resident(name, part, grid, block, lds_bytes, offsets, args, dims)
                self._check_clock()
        elif resident > 1:
            for part in chunks(workgroups(grid), resident):
                rec.wave_steps += self._run_resident(name, [[g] for g in part], grid, block, lds_bytes,
                                                     offsets, args, None, lockstep)
                self._check_clock()
        else:
            rec.batch = self._run_batches(name, lockstep, batch, grid, block, lds_bytes, offsets, args, rec)
        rec.seconds = time.perf_counter() - t0
        self.records.append(rec)

    def _run_batches(self, name, lockstep, batch, grid, block, lds_bytes, offsets, args, rec) -> int:
        """Run the grid's workgroups `batch` at a time (lazily: a grid may hold 2**31 of
        them); the batch size in the end (1 if a batch's control flow diverged)."""
        lds = None
        todo = workgroups(grid)
        chunk = list(itertools.islice(todo, batch))
        while chunk:
            if lds is None or lds.n_groups != len(chunk):
                lds = LocalMemory(lds_bytes, len(chunk), fill=LDS_FILL)
            try:
                if lockstep is not None:
                    rec.wave_steps += self._run_lockstep(lockstep, chunk, grid, block, lds, offsets, args,
                                                          batch > 1)
                else:
                    rec.wave_steps += self._run_batch(name, chunk, grid, block, lds, offsets, args)
            except BatchDivergence:
                if batch == 1 or lockstep is not None:  # lockstep never re-runs work (refused up front)
                    raise
                batch = 1  # control flow differs across workgroups: run them one by one
                lds = None
                todo = itertools.chain(chunk, todo)
            self._check_clock()
            chunk = list(itertools.islice(todo, batch))
        return batch

    # -- limits ----------------------------------------------------------------------------------

    def _start_clock(self, name: str, grid, block, threads: int) -> None:
        """The launch's CPU-time limit starts now; it covers every run of the launch."""
        seconds = self.limits.seconds(TIME_LIMIT, threads)
        self._clock = (seconds, time.process_time() + seconds, f"@{name} grid={grid} block={block}")

    def _budget(self, threads: int) -> Budget:
        """The budget of one scheduler run of `threads` threads in all."""
        seconds, deadline, label = self._clock
        return Budget(self.limits.steps(STEP_BUDGET, threads), seconds, deadline, label)

    def _check_clock(self) -> None:
        """Between two runs: a launch of many short runs is bounded by the limit too."""
        seconds, deadline, label = self._clock
        if time.process_time() > deadline:
            Budget(1, seconds, deadline, label).check_time()

    def _waves(self, chunk, team, grid, block, lds, offsets, batched, budget, dims=None,
               cluster=None) -> list[WaveCtx]:
        n_threads = block[0] * block[1] * block[2]
        n_waves = (n_threads + WAVE - 1) // WAVE
        waves = [WaveCtx(wave=w, n_waves=n_waves, groups=chunk, block=block, grid=grid, lds=lds,
                         gmem=self.gmem, lds_offsets=offsets, batched=batched, budget=budget, team=team)
                 for w in range(n_waves)]
        for w in waves:
            place_in_cluster(w, dims, cluster)
        if self._policy.delays_ds_stores:
            for w in waves:
                w.ds_queue = []
        return waves

    def _run_batch(self, name, chunk, grid, block, lds, offsets, args) -> int:
        batched = len(chunk) > 1
        prog: Program = translate(self.view, name, batched=batched, cache_key=self._key(name))
        waves = self._waves(chunk, 0, grid, block, lds, offsets, batched, self._budget(threads_of(block, chunk)))
        return self._schedule(prog, [(waves, chunk, lds)], grid, args, len(chunk))

    def _lockstep_program(self, name: str, dims, batched: bool) -> tuple[Program | None, str | None]:
        """The lockstep translation of kernel @name when this launch runs in lockstep, else
        None, and why a lockstep launch cannot (see `uniformity.lockstep_refusal`)."""
        if not self.policy.lockstep:
            return None, None
        if dims is not None:
            return None, "cluster launches interleave the workgroups of a cluster"
        if _taint.current() is not None:
            return None, "taint runs (ldssan rows) run per wave"
        return translate_lockstep(self.view, name, batched=batched, cache_key=self._key(name))

    def _run_lockstep(self, prog, chunk, grid, block, lds, offsets, args, batched: bool) -> int:
        budget = self._budget(threads_of(block, chunk))
        parts = self._waves(chunk, 0, grid, block, lds, offsets, len(chunk) > 1, budget)
        ls = LockstepCtx(parts, groups=chunk, block=block, grid=grid, lds=lds, gmem=self.gmem,
                         lds_offsets=offsets, budget=budget, batched=batched)
        place_in_cluster(ls, None, None)
        return self._schedule(prog, [(parts, chunk, lds)], grid, args, len(chunk), lockstep=[ls])

    def _run_resident(self, name, clusters, grid, block, lds_bytes, offsets, args, dims, lockstep=None) -> int:
        """Run `clusters` (lists of workgroups; one workgroup each without cluster dims)
        resident at once, each workgroup a team with its own LDS (`lockstep`: the program
        that runs each team's waves as one lockstep context)."""
        prog: Program = lockstep or translate(self.view, name, batched=False, cache_key=self._key(name))
        budget = self._budget(threads_of(block, [g for members in clusters for g in members]))
        teams, contexts = [], []
        for c, members in enumerate(clusters):
            for group in members:
                lds = LocalMemory(lds_bytes, 1, fill=LDS_FILL)
                waves = self._waves([group], len(teams), grid, block, lds, offsets, False, budget, dims,
                                    c if dims is not None else None)
                if lockstep is not None:
                    contexts.append(LockstepCtx(waves, groups=[group], block=block, grid=grid, lds=lds,
                                                gmem=self.gmem, lds_offsets=offsets, budget=budget,
                                                batched=False, team=len(teams)))
                    place_in_cluster(contexts[-1], None, None)
                teams.append((waves, [group], lds))
            if dims is not None:  # TDM multicast writes the LDS of the cluster's workgroups
                multicast.bind(teams[-len(members):], len(members))
        return self._schedule(prog, teams, grid, args, 1, lockstep=contexts or None)

    def _schedule(self, prog, teams, grid, args, lanes_per_wave_group: int,
                  lockstep: list[LockstepCtx] | None = None) -> int:
        """Run the waves of every team together under one scheduler (`lockstep`: one
        context per team, running the team's waves)."""
        ends = {}
        if self.sanitizer is not None:
            for waves, chunk, lds in teams:
                _record_ids_fit(grid, chunk)
                end = self.sanitizer.begin_batch(prog, waves, chunk, grid, lds.lds_bytes)
                for w in waves:
                    ends[id(w)] = end
        on_end = (lambda ctx: ends[id(ctx)](ctx)) if ends else None
        all_waves = [w for waves, _c, _l in teams for w in waves]
        if lockstep is not None:
            all_waves = lockstep
            if ends:
                for ls in lockstep:
                    ls.san = LockstepHooks(ls)
                    ls.lds_oob_ok = ls.parts[0].lds_oob_ok
                on_end = _end_parts(on_end)
        sched = Scheduler(prog, all_waves, args, self._policy, on_wave_end=on_end)
        sched.run()
        rec = self._current
        if self.sanitizer is not None:
            splits = self.sanitizer.end_batch()
            if splits:  # a batch whose workgroups' sync streams parted (split.BatchSplit)
                rec.stats["split_batches"] = rec.stats.get("split_batches", 0) + splits
        ops = sum(w.nops * (w.n_waves if w.lockstep else 1) for w in all_waves) * lanes_per_wave_group
        rec.wave_ops += ops
        rec.lane_ops += ops * WAVE
        return sched.steps


def _record_ids_fit(grid, chunk) -> None:
    """A violation record holds a workgroup's linear id in 32 bits: a workgroup beyond that
    is refused by name, never recorded under a wrapped id."""
    x, y, z = chunk[-1]  # the highest id of the chunk (x fastest)
    linear = x + grid[0] * (y + grid[1] * z)
    if linear > 0xFFFFFFFF:
        raise EmuLaunchError(f"ldssan-emu: grid={grid}: workgroup {chunk[-1]} has the linear id {linear:,}, "
                             "beyond the 32 bits a violation record holds; sanitize a smaller grid")


def _end_parts(on_end):
    """A lockstep context ends: each of its waves ends (the engine's wave_end, per wave)."""
    return lambda ctx: [on_end(part) for part in ctx.parts]



class HostCtx:
    """`ctx` of the host launcher: one lane, and the launch entry point."""

    def __init__(self, launcher: Launcher):
        self.L = 1
        self.mask = np.ones(1, dtype=bool)
        self.mask_full = True
        self.launcher = launcher
        self.nops = 0

    def tick(self) -> None:
        pass

    def loop(self, lb, ub, step) -> range:
        # FlyDSL's own host code: short loops over launch arguments, not kernel work
        return range(int(lb), int(ub), int(step))


# Ops with an emitter that refuses them with the reason (the emitter names it at translation).
REFUSED_OPS = ("rocdl.permlane16.swap", "rocdl.permlane32.swap", "rocdl.s.get.barrier.state",
               "rocdl.s.get.named.barrier.state", "arith.scaling_extf", "arith.scaling_truncf")

LAUNCH_FORMS = """\
launch forms: FlyDSL `@flyc.jit` host functions as their authors call them, any grid and
  block (<= 1024 threads, <= 320 KiB LDS incl. dynamic), cluster launches
  (`launch(cluster=(cx, cy, cz))`, <= 16 workgroups, grid a multiple of the cluster; the
  cluster's workgroups run resident together); emulate(batch=N) lockstep batches,
  emulate(resident=N) interleaved workgroups
arguments: torch tensors (default dynamic layout), from_torch_tensor / from_dlpack with static
  or dynamic layouts, from_c_void_p pointers and integer addresses into live CPU tensors,
  scalars of every width, constexprs, @fx.struct values
barriers: gpu.barrier, s_barrier, split workgroup barrier (-1), cluster barrier (-3, in a
  cluster launch); refused: named (1..16) and trap barriers, cluster-barrier isfirst
copies: TDM 2-D load/store (pad, out-of-bounds zero fill; multicast into the cluster peers
  the workgroup mask names, the issuer's bit included), async global<->LDS b8..b128
  (cluster.load.async.to.lds refused)
anything else is an UnsupportedOp naming the op and its Python line: please report it"""


def supported_text(width: int = 96) -> str:
    """What the virtual gfx1250 runs: launch and argument forms, and every op with an emitter
    (`ldssan env` prints it; the README summarizes it)."""
    import textwrap

    from .ops import load_all

    names = sorted(n for n in load_all() if not n.startswith("call:") and n not in REFUSED_OPS)
    by_dialect: dict[str, list[str]] = {}
    for n in names:
        by_dialect.setdefault(n.split(".", 1)[0], []).append(n)
    lines = ["virtual gfx1250 (ldssan.runtime.emu) runs:", LAUNCH_FORMS, f"ops ({len(names)}):"]
    for dialect, ops in by_dialect.items():
        lines += textwrap.wrap(", ".join(ops), width, initial_indent=f"  {dialect}: ", subsequent_indent="    ")
    from .ops.intrinsics import INTRINSICS

    lines += textwrap.wrap(", ".join(sorted(INTRINSICS)), width, initial_indent="  llvm.call_intrinsic of: ",
                           subsequent_indent="    ")
    lines += textwrap.wrap(", ".join(REFUSED_OPS), width, initial_indent="refused, with the reason: ",
                           subsequent_indent="  ")
    return "\n".join(lines)


def parse_module(text: str) -> ModuleView:
    """A `ModuleView` of MLIR text (a dumped stage-10 `.mlir`, or a test's module)."""
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    from ldssan.passes.ir.irview import view_module

    import hashlib

    with _create_mlir_context():
        view = view_module(ir.Module.parse(text))
    view.key = hashlib.sha256(text.encode()).hexdigest()[:20]
    return view


def run_kernel(view: ModuleView, kernel: str, *, grid, block, args: list, policy: Policy | str = "round-robin",
               batch: int = 1, smem: int = 0, sanitizer=None, resident: int = 1, cluster=None,
               time_limit: float | None = None, step_budget: int | None = None) -> Launcher:
    """Launch `kernel` of `view` directly. numpy arrays in `args` become global pointers
    (results land in them); other values are passed as they are. `cluster`: cluster dims
    (x, y, z) for a cluster launch; `time_limit` / `step_budget`: as `limits.Limits`."""
    if isinstance(policy, str):
        policy = Policy.parse(policy)
    gmem = GlobalMemory()
    values = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous:
                raise ValueError(f"argument {i}: arrays must be C-contiguous")
            gmem.add(a.ctypes.data, a.nbytes, f"arg{i}")
            values.append(np.int64(a.ctypes.data))
        else:
            values.append(a)
    launcher = Launcher(view, gmem, policy=policy, batch=batch, ir_key=view.key or None, sanitizer=sanitizer,
                        resident=resident, time_limit=time_limit, step_budget=step_budget)
    launcher.launch_kernel(kernel, grid, block, smem, tuple(values), cluster)
    return launcher

"""The runs of one launch: one runner per `plan.Strategy`, each called as
`runner(plan, geometry, run, args)`.

A runner cuts the launch's workgroups into scheduler runs (batches on the lane axis,
resident workgroups, whole clusters), builds each run's waves (`wave.WaveCtx`, and the
`wave.LockstepCtx` of each workgroup under lockstep) with fresh LDS, hands every team of
waves to the sanitizer (`begin_batch`) and runs them under one `sched.Scheduler`.
`LaunchRun` is what the runs of one launch share: memory, sanitizer, translations, the
CPU-time limit and the `LaunchRecord`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import EmuLaunchError
from . import multicast
from .codegen import Program, translate, translate_lockstep
from .grid import chunks, cluster_groups, place_in_cluster, threads_of, workgroups
from .interfaces import Sanitizer
from .limits import Limits
from .memory import GlobalMemory, LocalMemory
from .plan import Geometry, LaunchPlan, Strategy
from .sched import BatchDivergence, Scheduler
from .wave import WAVE, Budget, LockstepCtx, LockstepHooks, WaveCtx

# auto limits (limits.py): per 1024 threads of a scheduler run (one batch / resident chunk),
# loop iterations; per 1024 threads of a launch, CPU seconds of emulation
STEP_BUDGET = 50_000_000
TIME_LIMIT = 10.0
NATIVE_LANES = 8192
LDS_FILL = 0xFF  # fresh LDS reads as NaN / -1: uninitialised data is visible to output checks


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
    plan: LaunchPlan | None = None  # how the launch ran, and why


class Team(NamedTuple):
    """The waves of one scheduler team (a workgroup, or a batch of them on the lane axis)."""

    waves: list[WaveCtx]
    groups: list[tuple[int, int, int]]
    lds: LocalMemory


class LaunchRun:
    """One launch of kernel @`kernel` in progress. Its CPU-time limit starts when it is made
    and covers every run of the launch, translation included."""

    def __init__(self, view, gmem: GlobalMemory, geom: Geometry, *, sanitizer: Sanitizer | None,
                 cache_key: str | None, limits: Limits, native: str = "auto"):
        self.view = view
        self.gmem = gmem
        self.kernel = geom.kernel
        self.sanitizer = sanitizer  # binds each team's waves to its checker (None: plain emulation)
        self.cache_key = cache_key  # no content hash -> no caching (a stale translation must never run)
        self.limits = limits
        seconds = limits.seconds(TIME_LIMIT, geom.n_threads * geom.n_groups, sum(r.size for r in gmem.regions))
        self._clock = (seconds, time.process_time() + seconds, f"@{geom.kernel} grid={geom.grid} block={geom.block}")
        self._programs: dict[bool, Program] = {}
        # lockstep runs of lane-wise ops compiled to C ("auto": launches of NATIVE_LANES
        # threads or more, where a call's fixed cost is small beside its lanes' work)
        self.native = native == "on" or (native == "auto" and geom.n_threads * geom.n_groups >= NATIVE_LANES)
        self.native_eager = native == "on"
        self._lockstep: dict[bool, tuple[Program | None, str | None]] = {}
        self.record: LaunchRecord | None = None

    def program(self, batched: bool) -> Program:
        """The kernel's per-wave translation (`batched`: workgroups on the lane axis)."""
        prog = self._programs.get(batched)
        if prog is None:
            prog = self._programs[batched] = translate(self.view, self.kernel, batched=batched,
                                                       cache_key=self.cache_key)
        return prog

    def lockstep_refusal(self, batched: bool) -> str | None:
        """Why the kernel has no lockstep translation (`codegen.translate_lockstep`), else None;
        the oracle `plan.plan_launch` asks."""
        got = self._lockstep.get(batched)
        if got is None:
            got = self._lockstep[batched] = translate_lockstep(self.view, self.kernel, batched=batched,
                                                               native=self.native, cache_key=self.cache_key)
            if self.native_eager and got[0] is not None and got[0].native is not None:
                got[0].native.build()  # "on": no deferred build
        return got[1]

    def lockstep_program(self, batched: bool) -> Program:
        if self.lockstep_refusal(batched) is not None:
            raise AssertionError("ldssan-emu: a lockstep run of a kernel refused lockstep")
        return self._lockstep[batched][0]

    def native_program(self, plan: LaunchPlan):
        """The native split (`codegen.NativeSummary`) of the translation `plan`'s runs use, if
        it has native runs."""
        if not (plan.lockstep and self.native):
            return None
        prog = self._lockstep.get(plan.lockstep_batched, (None, None))[0]
        return prog.native if prog is not None else None

    def budget(self, threads: int) -> Budget:
        """The budget of one scheduler run of `threads` threads in all."""
        seconds, deadline, label = self._clock
        return Budget(self.limits.steps(STEP_BUDGET, threads), seconds, deadline, label)

    def check_clock(self) -> None:
        """Between two runs: a launch of many short runs is bounded by the limit too."""
        seconds, deadline, label = self._clock
        if time.process_time() > deadline:
            Budget(1, seconds, deadline, label).check_time()


# -- the runners ------------------------------------------------------------------------------------

def run_batches(plan: LaunchPlan, geom: Geometry, run: LaunchRun, args: tuple) -> None:
    """Per wave, `plan.batch` workgroups per run (drawn lazily: a grid may hold 2**31 of
    them); one at a time from the first batch whose control flow diverged."""
    batch = plan.batch
    lds = None
    todo = workgroups(geom.grid)
    chunk = list(itertools.islice(todo, batch))
    while chunk:
        lds = _lds_for(geom, lds, len(chunk))
        try:
            batched = len(chunk) > 1
            budget = run.budget(threads_of(geom.block, chunk))
            waves = _waves(plan, geom, run, chunk, lds, budget, batched=batched)
            run.record.wave_steps += _schedule(plan, geom, run, run.program(batched), [Team(waves, chunk, lds)],
                                               args)
        except BatchDivergence:
            if batch == 1:
                raise
            batch = 1  # control flow differs across workgroups: run them one by one
            lds = None
            todo = itertools.chain(chunk, todo)
        run.check_clock()
        chunk = list(itertools.islice(todo, batch))
    run.record.batch = batch


def run_lockstep(plan: LaunchPlan, geom: Geometry, run: LaunchRun, args: tuple) -> None:
    """The waves of each workgroup as one lockstep context, `plan.batch` workgroups on the
    lane axis per run (never re-run: `uniformity.lockstep_refusal` refused divergence up front)."""
    prog = run.lockstep_program(plan.lockstep_batched)
    lds = None
    for chunk in chunks(workgroups(geom.grid), plan.batch):
        lds = _lds_for(geom, lds, len(chunk))
        budget = run.budget(threads_of(geom.block, chunk))
        parts = _waves(plan, geom, run, chunk, lds, budget, batched=len(chunk) > 1)
        ls = _lockstep_ctx(geom, run, parts, chunk, lds, budget, batched=plan.lockstep_batched)
        run.record.wave_steps += _schedule(plan, geom, run, prog, [Team(parts, chunk, lds)], args, [ls])
        run.check_clock()
    run.record.batch = plan.batch


def run_resident(plan: LaunchPlan, geom: Geometry, run: LaunchRun, args: tuple) -> None:
    """`plan.per_run` workgroups interleaved per run, each a team with its own LDS (per wave,
    or one lockstep context each)."""
    prog = run.lockstep_program(False) if plan.lockstep else run.program(False)
    for part in chunks(workgroups(geom.grid), plan.per_run):
        run.record.wave_steps += _run_together(plan, geom, run, prog, [[g] for g in part], args)
        run.check_clock()


def run_clusters(plan: LaunchPlan, geom: Geometry, run: LaunchRun, args: tuple) -> None:
    """`plan.per_run` whole clusters interleaved per run (plan.py's docstring), per wave."""
    prog = run.program(False)
    for part in chunks(cluster_groups(geom.grid, geom.cluster), plan.per_run):
        run.record.wave_steps += _run_together(plan, geom, run, prog, part, args)
        run.check_clock()


RUNNERS = {Strategy.BATCHES: run_batches, Strategy.LOCKSTEP: run_lockstep, Strategy.RESIDENT: run_resident,
           Strategy.CLUSTERS: run_clusters}


# -- the parts of a run -----------------------------------------------------------------------------

def _lds_for(geom: Geometry, lds: LocalMemory | None, n_groups: int) -> LocalMemory:
    """The LDS of a chunk of `n_groups` workgroups: the previous chunk's when it has their number."""
    if lds is None or lds.n_groups != n_groups:
        lds = LocalMemory(geom.lds_bytes, n_groups, fill=LDS_FILL)
    return lds


def _run_together(plan: LaunchPlan, geom: Geometry, run: LaunchRun, prog: Program, clusters, args: tuple) -> int:
    """Run `clusters` (lists of workgroups; one workgroup each outside a cluster launch)
    resident at once, each workgroup a team with its own LDS."""
    budget = run.budget(threads_of(geom.block, [g for members in clusters for g in members]))
    teams, contexts = [], []
    for c, members in enumerate(clusters):
        for group in members:
            lds = LocalMemory(geom.lds_bytes, 1, fill=LDS_FILL)
            waves = _waves(plan, geom, run, [group], lds, budget, team=len(teams),
                           cluster=c if geom.cluster is not None else None)
            if plan.lockstep:
                contexts.append(_lockstep_ctx(geom, run, waves, [group], lds, budget, batched=False, team=len(teams)))
            teams.append(Team(waves, [group], lds))
        if geom.cluster is not None:  # TDM multicast writes the LDS of the cluster's workgroups
            multicast.bind(teams[-len(members):], len(members))
    return _schedule(plan, geom, run, prog, teams, args, contexts or None, lanes=1)


def _waves(plan: LaunchPlan, geom: Geometry, run: LaunchRun, groups, lds: LocalMemory, budget: Budget, *,
           batched: bool = False, team: int = 0, cluster: int | None = None) -> list[WaveCtx]:
    waves = [WaveCtx(wave=w, n_waves=geom.n_waves, groups=groups, block=geom.block, grid=geom.grid, lds=lds,
                     gmem=run.gmem, lds_offsets=geom.lds_offsets, batched=batched, budget=budget, team=team)
             for w in range(geom.n_waves)]
    for w in waves:
        place_in_cluster(w, geom.cluster, cluster)
    if plan.policy.delays_ds_stores:
        for w in waves:
            w.ds_queue = []
    return waves


def _lockstep_ctx(geom: Geometry, run: LaunchRun, parts: list[WaveCtx], groups, lds: LocalMemory, budget: Budget,
                  *, batched: bool, team: int = 0) -> LockstepCtx:
    ls = LockstepCtx(parts, groups=groups, block=geom.block, grid=geom.grid, lds=lds, gmem=run.gmem,
                     lds_offsets=geom.lds_offsets, budget=budget, batched=batched, team=team)
    place_in_cluster(ls, None, None)
    return ls


def _schedule(plan: LaunchPlan, geom: Geometry, run: LaunchRun, prog: Program, teams: list[Team], args: tuple,
              contexts: list[LockstepCtx] | None = None, *, lanes: int | None = None) -> int:
    """Run the waves of every team together under one scheduler (`contexts`: one lockstep
    context per team, running the team's waves); the scheduler's steps. `lanes`: workgroups
    per wave (a batch's; default: the one team's)."""
    lanes = len(teams[0].groups) if lanes is None else lanes
    ends = {}
    if run.sanitizer is not None:
        for team in teams:
            _record_ids_fit(geom.grid, team.groups)
            end = run.sanitizer.begin_batch(prog, team.waves, team.groups, geom.grid, team.lds.lds_bytes)
            for w in team.waves:
                ends[id(w)] = end
    on_end = (lambda ctx: ends[id(ctx)](ctx)) if ends else None
    all_waves = [w for team in teams for w in team.waves]
    if contexts is not None:
        all_waves = contexts
        if ends:
            for ls in contexts:
                ls.san = LockstepHooks(ls)
                ls.lds_oob_ok = ls.parts[0].lds_oob_ok
            on_end = _end_parts(on_end)
    sched = Scheduler(prog, all_waves, args, plan.policy, on_wave_end=on_end)
    sched.run()
    rec = run.record
    if run.sanitizer is not None:
        splits = run.sanitizer.end_batch()
        if splits:  # a batch whose workgroups' sync streams parted (split.BatchSplit)
            rec.stats["split_batches"] = rec.stats.get("split_batches", 0) + splits
    ops = sum(w.nops * (w.n_waves if w.lockstep else 1) for w in all_waves) * lanes
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

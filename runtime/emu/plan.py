"""How one launch runs: its `Geometry` (grid, block, waves, LDS layout, cluster shape) and its
`LaunchPlan` (strategy, lockstep, batch, workgroups per run, and why), decided by one pure
function, `plan_launch`, before any wave runs. The runners (runners.py) only carry it out.

Strategies (`Strategy`):
- BATCHES: per wave, `batch` workgroups on the lane axis per scheduler run (one at a time
  again when their control flow diverges at a barrier);
- LOCKSTEP: the waves of each workgroup as one lane array (`wave.LockstepCtx`), `batch`
  workgroups on the lane axis per run;
- RESIDENT: `per_run` workgroups interleaved by the scheduler, each with its own LDS
  (persistent kernels, cross-workgroup flags), per wave or one lockstep context each;
- CLUSTERS: `per_run` whole clusters interleaved (see `cluster_dims`).

Cluster launches (`gpu.launch_func ... clusters in (cx, cy, cz)`, FlyDSL's
`launch(cluster=...)`): the grid is tiled by clusters of cx*cy*cz workgroups (at most 16,
the width of the multicast mask; every grid dim a multiple of its cluster dim: partial
clusters are refused). A cluster's workgroups are always resident together, interleaved by
the scheduler, so that cluster barriers (`s_barrier_signal/wait -3`) can complete and TDM
multicast reaches their LDS (`multicast.bind`, in `runners.run_clusters`); `resident=N`
runs N // (cluster size) clusters at once (at least one); no batching. Each wave knows its
cluster (`grid.place_in_cluster`): `cdim` (cluster dims), `cid` (cluster id in the grid =
workgroup id // cdim), `cwg` (workgroup id within the cluster = workgroup id % cdim),
`cluster` (which cluster of the run, None outside one); outside a cluster launch a
workgroup is its own cluster of one (`cwg` = 0).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from ldssan.passes.ir.irview import ModuleView
from ldssan.passes.ir.types import byte_size

from .errors import EmuLaunchError
from .sched import Policy
from .wave import WAVE

LDS_LIMIT = 327680  # gfx1250 addressable LDS per workgroup
MAX_CLUSTER = 16  # workgroups per cluster: the TDM / cluster-load workgroup mask has 16 bits

# `batch=AUTO`: lockstep launches put as many workgroups on the lane axis as fit these
# budgets (per-wave launches run one workgroup at a time). Every value of a lockstep run is
# an array over its lanes, so the lane count bounds the memory of a chunk. 32K lanes, against
# 16K (2026-12-03, one process setting this constant in turn, 3 rounds, a loaded machine):
# sanitized RMSNorm 4096x8192 -19%, plain lockstep RMSNorm -25%, sanitized GEMM 512^3 -14%.
# 64K, once native runs and compiled checks made the per-lane work cheap and the per-chunk
# (per-event) work the larger share (2026-12-03, same method, 5 rounds, the other core busy):
# sanitized RMSNorm -6%, plain lockstep -17%; 128K gained little more (-10%, -17%) for twice
# the memory of a chunk.
AUTO = 0
LANE_BUDGET = 65536
LDS_BUDGET = 64 << 20  # bytes of LDS of one chunk's workgroups

# why a lockstep policy's launch runs per wave, when the kernel is not the reason
CLUSTER_REFUSAL = "cluster launches interleave the workgroups of a cluster"
TAINT_REFUSAL = "taint runs (ldssan rows) run per wave"


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


@dataclass(frozen=True)
class Geometry:
    """The shape of one launch of kernel @`kernel`: everything a run needs to build its waves
    (`of` checks it against the module and gfx1250's limits)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int  # dynamic LDS bytes asked by the launch
    lds_bytes: int  # LDS of one workgroup: the module's LDS globals, then the dynamic bytes
    lds_offsets: dict[str, int] = field(hash=False)  # LDS global -> its offset (lds_layout)
    cluster: tuple[int, int, int] | None = None  # cluster dims of a cluster launch

    @classmethod
    def of(cls, view: ModuleView, name: str, grid, block, smem, cluster=None) -> "Geometry":
        grid = tuple(int(x) for x in grid)
        block = tuple(int(x) for x in block)
        fn = view.functions.get(name)
        if fn is None or not fn.is_kernel:
            raise RuntimeError(f"ldssan-emu: gpu.launch_func names @{name}, which is not a kernel of the module")
        n_threads = block[0] * block[1] * block[2]
        if n_threads <= 0 or n_threads > 1024 or min(grid) <= 0:
            raise ValueError(f"ldssan-emu: bad launch geometry grid={grid} block={block} for @{name}")
        smem = int(smem)
        if smem < 0:  # would shift every dynamic LDS byte: a bogus LDS031 and wrong data
            raise EmuLaunchError(f"ldssan-emu: @{name}: dynamic LDS size smem={smem} bytes is negative")
        offsets, lds_bytes = lds_layout(view, smem)
        if lds_bytes > LDS_LIMIT:
            raise ValueError(f"ldssan-emu: @{name} needs {lds_bytes} bytes of LDS; gfx1250 has {LDS_LIMIT}")
        return cls(name, grid, block, smem, lds_bytes, offsets, cluster_dims(name, grid, cluster))

    @property
    def n_threads(self) -> int:
        """Threads of one workgroup."""
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def n_waves(self) -> int:
        """Waves of one workgroup."""
        return (self.n_threads + WAVE - 1) // WAVE

    @property
    def n_groups(self) -> int:
        """Workgroups of the grid."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def cluster_size(self) -> int:
        """Workgroups of one cluster (1 outside a cluster launch)."""
        c = self.cluster or (1, 1, 1)
        return c[0] * c[1] * c[2]


class Strategy(enum.Enum):
    """How the workgroups of a launch meet the scheduler (the module docstring)."""

    BATCHES = "batches"
    LOCKSTEP = "lockstep"
    RESIDENT = "resident"
    CLUSTERS = "clusters"


class Decision(NamedTuple):
    """One decision of a plan: what was decided, to which value, and why."""

    what: str
    value: object
    why: str


@dataclass(frozen=True)
class LaunchPlan:
    """How a launch runs (`plan_launch`); `decisions` say why, in the order they were made
    (a later decision on the same `what` revises an earlier one)."""

    strategy: Strategy
    policy: Policy  # the policy the runs use: a lockstep policy's refused launch runs per wave
    lockstep: bool  # the waves of a workgroup run as one lockstep context
    batch: int  # workgroups on the lane axis per run (BATCHES, LOCKSTEP); 1 otherwise
    per_run: int  # workgroups (CLUSTERS: clusters) resident together in one scheduler run
    lockstep_refused: str | None = None  # why a lockstep policy's launch runs per wave
    lockstep_batch_refused: str | None = None  # why lockstep runs one workgroup at a time
    decisions: tuple[Decision, ...] = ()

    def why(self, what: str) -> str:
        """The reason for the final value of `what` ("lockstep", "batch", "strategy")."""
        return [d.why for d in self.decisions if d.what == what][-1]

    @property
    def lockstep_batched(self) -> bool:
        """Which lockstep translation the runs use: the batched one (workgroups on the lane axis)."""
        return self.lockstep and self.batch > 1


def plan_launch(geom: Geometry, *, policy: Policy, batch: int, resident: int, taint: bool,
                lockstep_refusal: Callable[[bool], str | None]) -> LaunchPlan:
    """The plan of a launch of `geom` under the user's `policy`, `batch` (AUTO or >= 1) and
    `resident` workgroups (>= 1). `taint`: the launch runs under `ldssan rows`' taint.
    `lockstep_refusal(batched)`: why the kernel cannot run in lockstep (the batched
    translation when `batched`: workgroups on the lane axis), None when it can — asked only
    under a lockstep policy, at most once per value of `batched`."""
    asked = AUTO if batch == AUTO else max(1, batch)
    resident = max(1, resident)
    if geom.cluster is not None:
        return _cluster_plan(geom, policy, resident)
    size = asked or auto_batch(geom.n_groups, geom.n_waves, geom.lds_bytes)
    decisions = [Decision("batch", size, f"batch={asked} asked" if asked else
                          f"auto: {geom.n_groups} workgroups within {LANE_BUDGET} lanes and {LDS_BUDGET} LDS bytes")]

    def refusal(batched: bool) -> str | None:
        return TAINT_REFUSAL if taint else lockstep_refusal(batched)

    lockstep, refused, batch_refused = False, None, None
    if policy.lockstep:
        refused = refusal(size > 1)
        if refused is not None and size > 1 and asked == AUTO:
            # not across workgroups (a while loop, an atomic-steered protocol): each
            # workgroup in lockstep still may, interleaved with the others
            batch_refused, refused, size = refused, refusal(False), 1
            decisions.append(Decision("batch", 1, f"no lockstep across workgroups: {batch_refused}"))
        lockstep = refused is None
    why = refused or ("uniformity.lockstep_refusal finds nothing against it" if lockstep
                      else f"the policy {policy} runs per wave")
    decisions.append(Decision("lockstep", lockstep, why))
    if not lockstep and asked == AUTO and size > 1:
        size = 1
        decisions.append(Decision("batch", 1, "per-wave runs batch only when asked (they re-run a chunk "
                                              "on divergence)"))
    if lockstep and 1 < size < geom.n_groups and resident > 1:
        # workgroups asked to be resident together share a batch: one of them may wait on
        # another, which only runs beside it in the same batch (uniformity.lockstep_refusal)
        size = max(resident, size - size % resident)
        decisions.append(Decision("batch", size, f"a multiple of resident={resident}: workgroups asked to "
                                                 "be resident together share a batch"))
    run_policy = policy if lockstep else policy.per_wave
    if resident > 1 and (not lockstep or size == 1):
        if size > 1:
            decisions.append(Decision("batch", 1, "resident workgroups run side by side, not batched"))
        return LaunchPlan(Strategy.RESIDENT, run_policy, lockstep, 1, resident, refused, batch_refused, (
            *decisions, Decision("strategy", Strategy.RESIDENT,
                                 f"resident={resident} workgroups interleaved per run, each with its own LDS")))
    # a batched lockstep run needs no resident workgroups: its workgroups run side by side
    strategy = Strategy.LOCKSTEP if lockstep else Strategy.BATCHES
    return LaunchPlan(strategy, run_policy, lockstep, size, 1, refused, batch_refused, (
        *decisions, Decision("strategy", strategy, f"{size} workgroup(s) on the lane axis per run")))


def _cluster_plan(geom: Geometry, policy: Policy, resident: int) -> LaunchPlan:
    refused = CLUSTER_REFUSAL if policy.lockstep else None
    per_run = max(1, resident // geom.cluster_size)
    return LaunchPlan(Strategy.CLUSTERS, policy.per_wave, False, 1, per_run, refused, None, (
        Decision("lockstep", False, refused or f"the policy {policy} runs per wave"),
        Decision("batch", 1, "batching is off for cluster launches"),
        Decision("strategy", Strategy.CLUSTERS,
                 f"{per_run} cluster(s) of {geom.cluster_size} workgroups resident per run "
                 f"(resident={resident}): a cluster's workgroups always run together"),
    ))

"""Static uniformity: which SSA values are the same in every lane of a (batched) wave.

Uniform values stay numpy scalars (or (n,) vectors) in the generated code, per-lane values
are (L,) / (L, n) arrays. Knowing this at translation time removes the shape ambiguity
between a uniform vector<32 x T> and a per-lane scalar, and keeps loop counters scalar.

A value is per-lane when an operand is, when the op is a per-lane source (thread ids,
atomics returning old values, cross-lane shuffles), or when it is the result of a region op
whose control is per-lane (scf.if on a per-lane condition merges two sides). Loop-carried
values are solved to a fixpoint. Workgroup ids are per-lane because workgroups are batched
along the lane axis; under lockstep (the waves of a workgroup as one lane array) wave ids
and everything uniform only per wave are per-lane too.

`lockstep_refusal` decides, before a launch runs, whether a kernel may run in lockstep.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Block, Op
from ldssan.passes.ir.types import parse_memref

# Ops whose results differ across lanes even when every operand is uniform.
LANE_SOURCES = frozenset({
    "gpu.thread_id", "gpu.lane_id", "gpu.global_id", "gpu.cluster_id", "gpu.cluster_block_id",
    "rocdl.workitem.id.x", "rocdl.workitem.id.y", "rocdl.workitem.id.z",
    "rocdl.mbcnt.lo", "rocdl.mbcnt.hi",
    "gpu.shuffle", "rocdl.ds_swizzle", "rocdl.ds_bpermute", "rocdl.permlanex16",
    "rocdl.permlane16.var", "rocdl.permlanex16.var",
    "rocdl.permlane16.swap", "rocdl.permlane32.swap", "rocdl.update.dpp", "rocdl.mov.dpp",
    "llvm.atomicrmw", "llvm.cmpxchg",
    # WMMA results hold a lane's fragment of the accumulator.
})
LANE_SOURCE_PREFIXES = ("rocdl.wmma", "rocdl.swmmac", "rocdl.ds.load.tr")

# Ops whose results are uniform whatever their operands.
UNIFORM_SOURCES = frozenset({
    "rocdl.wave.id", "gpu.subgroup_id", "gpu.num_subgroups", "gpu.subgroup_size",
    "gpu.block_dim", "gpu.grid_dim", "rocdl.workgroup.dim.x", "rocdl.workgroup.dim.y",
    "rocdl.workgroup.dim.z",
})
# Uniform within one workgroup only: per-lane when workgroups are batched on the lane axis.
GROUP_UNIFORM = frozenset({
    "rocdl.readfirstlane", "rocdl.readlane", "rocdl.ballot", "gpu.block_id",
    "rocdl.workgroup.id.x", "rocdl.workgroup.id.y", "rocdl.workgroup.id.z",
})


def _yield_operands(blocks: list[Block]) -> tuple[int, ...]:
    for blk in blocks:
        if blk.ops and blk.ops[-1].name in ("scf.yield", "scf.condition"):
            return blk.ops[-1].operands
    return ()


def _reads_lds(op: Op) -> bool:
    # LDS is per workgroup, so even a uniform LDS address reads per-lane data under batching.
    if op.name in ("memref.load", "vector.load"):
        mt = parse_memref(op.operand_types[0].name)
        return mt is not None and mt.space == 3
    return op.name == "llvm.load" and op.operand_types[0].kind == "ptr" and op.operand_types[0].width == 3


# Uniform per wave only: per-lane when the waves of a workgroup run as one lane array.
WAVE_ONLY = frozenset({"rocdl.wave.id", "gpu.subgroup_id", "rocdl.readfirstlane", "rocdl.readlane",
                       "rocdl.ballot"})


LANE_READS = frozenset({"rocdl.readfirstlane", "rocdl.readlane"})


class Uniformity:
    def __init__(self, batched: bool, lockstep: bool = False) -> None:
        self.varying: set[int] = set()
        self.batched = batched
        self.lockstep = lockstep

    def is_uniform(self, vid: int) -> bool:
        return vid not in self.varying

    def _mark(self, vids) -> bool:
        before = len(self.varying)
        self.varying.update(vids)
        return len(self.varying) != before

    def run(self, blocks: list[Block]) -> None:
        for blk in blocks:
            for op in blk.ops:
                self.op(op)

    def op(self, op: Op) -> None:
        name = op.name
        if name == "scf.for":
            self._loop(op, carried_from=3, region=0)
        elif name == "scf.while":
            self._while(op)
        elif name == "scf.if":
            self._if(op)
        elif op.regions:
            for region in op.regions:
                self.run(region)
            if any(v in self.varying for v in op.operands):
                self._mark(op.results)
        elif name in WAVE_ONLY and self.lockstep:
            # reading one lane of a value uniform across the lockstep context gives that value
            if name not in LANE_READS or op.operands[0] in self.varying:
                self._mark(op.results)
        elif name in UNIFORM_SOURCES or (name in GROUP_UNIFORM and not self.batched):
            return
        elif name in GROUP_UNIFORM or name in LANE_SOURCES or name.startswith(LANE_SOURCE_PREFIXES) \
                or (_reads_lds(op) and not self._team_uniform_load(op)):
            self._mark(op.results)
        elif any(v in self.varying for v in op.operands):
            self._mark(op.results)

    def _team_uniform_load(self, op: Op) -> bool:
        # One workgroup in lockstep reads LDS with every lane at one instant: a uniform
        # address gives every lane the same value (batched workgroups read different LDS).
        return self.lockstep and not self.batched and not any(v in self.varying for v in op.operands)

    def _if(self, op: Op) -> None:
        for region in op.regions:
            self.run(region)
        if op.operands[0] in self.varying:
            self._mark(op.results)
            return
        for region in op.regions:
            ys = _yield_operands(region)
            self._mark(r for r, y in zip(op.results, ys) if y in self.varying)

    def _loop(self, op: Op, carried_from: int, region: int) -> None:
        body = op.regions[region]
        iv, *iter_args = body[0].args
        lb, ub, step, *inits = op.operands
        if any(v in self.varying for v in (lb, ub, step)):
            # A per-lane trip count makes everything the loop carries per-lane.
            self._mark([iv, *iter_args, *op.results])
        self._mark(a for a, i in zip(iter_args, inits) if i in self.varying)
        while True:
            self.run(body)
            ys = _yield_operands(body)
            changed = self._mark(a for a, y in zip(iter_args, ys) if y in self.varying)
            if not changed:
                break
        self._mark(r for r, a in zip(op.results, iter_args) if a in self.varying)

    def _while(self, op: Op) -> None:
        before, after = op.regions
        b_args = before[0].args
        a_args = after[0].args
        self._mark(a for a, i in zip(b_args, op.operands) if i in self.varying)
        while True:
            self.run(before)
            cond = before[0].ops[-1]  # scf.condition(%c, forwarded...)
            c, *fwd = cond.operands
            if c in self.varying:
                # A per-lane exit makes every carried and produced value per-lane.
                changed = self._mark([*b_args, *a_args, *op.results])
            else:
                changed = self._mark(a for a, f in zip(a_args, fwd) if f in self.varying)
                changed |= self._mark(r for r, f in zip(op.results, fwd) if f in self.varying)
            self.run(after)
            ys = _yield_operands(after)
            changed |= self._mark(b for b, y in zip(b_args, ys) if y in self.varying)
            if not changed:
                break


def analyze(blocks: list[Block], *, batched: bool, lockstep: bool = False,
            varying_args: tuple[int, ...] = ()) -> Uniformity:
    u = Uniformity(batched, lockstep)
    u.varying.update(varying_args)
    u.run(blocks)
    return u



# -- may a kernel run in lockstep? ---------------------------------------------------------------
BARRIER_OPS = frozenset({"gpu.barrier", "rocdl.s.barrier", "rocdl.barrier", "rocdl.s.barrier.signal",
                         "rocdl.s.barrier.wait", "rocdl.s.barrier.signal.isfirst"})
ATOMIC_OPS = frozenset({"llvm.atomicrmw", "llvm.cmpxchg"})
# operands the run-time code reads as one number (`int(...)`): they must stay uniform
SCALAR_OPERANDS = {"rocdl.mbcnt.lo": (0,), "rocdl.mbcnt.hi": (0,), "rocdl.permlanex16": (2, 3)}


class _Reach(Uniformity):
    """Values computed (through SSA and control dependence) from the result of an atomic."""

    def op(self, op: Op) -> None:
        if op.regions:
            super().op(op)
        elif op.name in ATOMIC_OPS or any(v in self.varying for v in op.operands):
            self._mark(op.results)


def _while_exit(op: Op) -> int:
    return op.regions[0][0].ops[-1].operands[0]  # scf.condition(%exit, ...)


def _controls(op: Op) -> tuple[int, ...]:
    """The operands that decide which lanes run an op's regions."""
    if op.name == "scf.if":
        return op.operands[:1]
    if op.name == "scf.for":
        return op.operands[:3]
    return ()


def lockstep_refusal(blocks: list[Block], batched: bool = True) -> str | None:
    """Why the waves of a workgroup (`batched`: of several workgroups) cannot run this kernel
    as one lane array, or None.

    Lockstep runs every wave through the same instruction stream under exec masks, so a
    barrier must be reached by all of a workgroup's lanes at once (not under control that
    differs across its waves or lanes: per-wave barrier sequences); batched workgroups may
    differ (each takes part in a barrier whole, or not at all). A `while` loop must leave
    every lane of a workgroup at once (else a wave could spin on another wave of its
    workgroup that lockstep keeps waiting behind the loop). Batched, a workgroup still in
    such a loop waits there for the ones that left it, which run nothing until every
    workgroup has left: a loop whose exit differs across workgroups is refused when anything
    after it (later in an enclosing loop, or on the other side of an if it sits in, which
    lockstep runs after this side) writes memory outside LDS, the only way a workgroup could
    be waiting on one that left. A global atomic whose result steers control
    flow is a cross-workgroup protocol (a ticket, a last-block count) whose order batching
    would fix. One workgroup's lockstep context runs interleaved with other workgroups
    (resident launches) like a wave does. Decided from the IR before anything runs, so a
    refused kernel falls back to the per-wave scheduler with no side effect."""
    per_wave = analyze(blocks, batched=batched)
    lock = analyze(blocks, batched=batched, lockstep=True)
    team = analyze(blocks, batched=False, lockstep=True) if batched else lock
    wave_varying = lock.varying - per_wave.varying
    reach = _Reach(batched=True)
    if batched:
        reach.run(blocks)
    return _Refuser(lock, team, wave_varying, reach, batched).run(blocks, False, False, False)


class _Refuser:
    """One walk of `lockstep_refusal` (the analyses it reads, and the tails it computed)."""

    def __init__(self, lock: Uniformity, team: Uniformity, wave_varying: set, reach: Uniformity, batched: bool):
        self.lock, self.team, self.wave_varying, self.reach, self.batched = lock, team, wave_varying, reach, batched
        self._writes: dict[int, bool] = {}

    def writes_outside_lds(self, op: Op) -> bool:
        """Whether `op` (or an op nested in it) may write memory another workgroup can see."""
        got = self._writes.get(id(op))
        if got is None:
            got = _writes_outside_lds(op) or any(self.writes_outside_lds(o) for region in op.regions
                                                 for blk in region for o in blk.ops)
            self._writes[id(op)] = got
        return got

    def run(self, blocks, divergent: bool, in_batch: bool, tail: bool) -> str | None:
        """`divergent`: under control that differs within a workgroup; `in_batch`: across
        batched workgroups; `tail`: something after these blocks writes outside LDS."""
        for blk in blocks:
            after = [False] * (len(blk.ops) + 1)
            for i in range(len(blk.ops) - 1, -1, -1):
                after[i] = after[i + 1] or self.writes_outside_lds(blk.ops[i])
            for i, op in enumerate(blk.ops):
                why = self.op(op, divergent, in_batch, tail or after[i + 1])
                if why:
                    return why
        return None

    def op(self, op: Op, divergent: bool, in_batch: bool, tail: bool) -> str | None:
        lock, team = self.lock, self.team
        where = f"'{op.name}' at {op.loc}"
        ctl = _controls(op)
        if op.name == "scf.while":
            exit_ = _while_exit(op)
            if divergent or exit_ in team.varying:
                return f"{where}: a while loop whose exit differs across waves or lanes (it may spin on another wave)"
            if self.batched and (in_batch or exit_ in lock.varying) and tail:
                return (f"{where}: a while loop whose exit differs across workgroups, with a store to memory "
                        "outside LDS after it (a workgroup may spin on one that left the loop)")
        if op.name in BARRIER_OPS and divergent:
            return f"{where}: a barrier under control flow that differs across waves or lanes"
        if any(v in self.reach.varying for v in ctl):
            return f"{where}: control flow decided by an atomic's result"
        for i in SCALAR_OPERANDS.get(op.name, ()):
            if i < len(op.operands) and op.operands[i] in self.wave_varying:
                return f"{where}: an operand that differs across waves where one value is needed"
        if op.name == "llvm.call" and any(v in self.wave_varying and t.kind == "int"
                                          for v, t in zip(op.operands, op.operand_types)):
            return f"{where}: a call operand that differs across waves where one value is needed"
        if not op.regions:
            return None
        inner = divergent or any(v in team.varying for v in ctl)
        batch = in_batch or any(v in lock.varying for v in ctl)
        if op.name == "scf.while":
            batch = batch or _while_exit(op) in lock.varying
        # later iterations of a loop run its whole body again after any op in it
        tail = tail or (op.name in ("scf.for", "scf.while") and self.writes_outside_lds(op))
        for i, region in enumerate(op.regions):
            # lockstep runs an if's else side after its then side, under the other lanes
            later = any(self.writes_outside_lds(o) for r in op.regions[i + 1:] for blk in r for o in blk.ops)
            why = self.run(region, inner, batch, tail or later)
            if why:
                return why
        return None


def _writes_outside_lds(op: Op) -> bool:
    """Whether the op itself may write global (or other workgroups') memory: stores and
    atomics not to LDS, copies out of LDS, buffer writes; calls other than ldssan's hooks."""
    name = op.name
    if name == "llvm.call":
        return not str(op.attr("callee") or "").startswith("__ldssan_")
    if name in ("llvm.store", "llvm.atomicrmw", "llvm.cmpxchg"):
        ptr = op.operand_types[1 if name == "llvm.store" else 0]
        return not (ptr.kind == "ptr" and ptr.width == 3)
    return not name.startswith("rocdl.ds") and any(word in name for word in ("store", "atomic", "write"))


# -- may a batch's workgroups issue different sync streams? ------------------------------------
# Values that may differ between workgroups with the same lanes: workgroup ids, and anything
# read from memory (each workgroup has its own LDS; global memory may differ when read).
GROUP_SOURCES = frozenset({"gpu.block_id", "gpu.cluster_id", "gpu.cluster_block_id", "rocdl.workgroup.id.x",
                           "rocdl.workgroup.id.y", "rocdl.workgroup.id.z"})


def _reads_memory(op: Op) -> bool:
    name = op.name
    return name in ("llvm.load", "llvm.atomicrmw", "llvm.cmpxchg") or name.startswith("rocdl.ds") \
        or any(word in name for word in ("load", "atomic", "buffer", "gather"))


class _GroupDependent(Uniformity):
    """Values that may differ across workgroups, lane for lane (lane ids do not)."""

    def op(self, op: Op) -> None:
        if op.regions:
            super().op(op)
        elif op.name in GROUP_SOURCES or _reads_memory(op) or any(v in self.varying for v in op.operands):
            self._mark(op.results)


def split_possible(blocks: list[Block]) -> bool:
    """Whether an ldssan hook sits under control that may differ across workgroups, so that
    an event may reach some workgroups of a batch only (`split.BatchSplit` then splits it)."""
    dep = _GroupDependent(batched=True)
    dep.run(blocks)

    def walk(blocks, under: bool) -> bool:
        for blk in blocks:
            for op in blk.ops:
                if under and op.name == "llvm.call" and str(op.attr("callee") or "").startswith("__ldssan_"):
                    return True
                if not op.regions:
                    continue
                inner = under or any(v in dep.varying for v in _controls(op)) or (
                    op.name == "scf.while" and _while_exit(op) in dep.varying)
                if any(walk(region, inner) for region in op.regions):
                    return True
        return False

    return walk(blocks, False)

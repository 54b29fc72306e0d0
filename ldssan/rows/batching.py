"""Automatic batching for `ldssan rows`: run several workgroups in lockstep when the kernel's
IR shows they cannot depend on each other.

A batch runs its workgroups side by side, one scheduler step for all of them, instead of one
workgroup after the other. That changes nothing for workgroups that share no state but
global memory they do not synchronise on; it would change (or deadlock) kernels whose
workgroups talk to each other. Correct cross-workgroup communication on gfx1250 needs one
of: a global atomic (counters, flags, float accumulation), an atomic or volatile global
load/store (a flag polled or published), a fence wider than the workgroup (publishing to
other workgroups), a cluster op (cluster ids, the cluster barrier) or a sleep (a spin-wait).
A module with none of these has independent workgroups and is batched; any one of them
keeps the call at one workgroup per batch, and the reason names the op and its line.
Plain global stores that another workgroup reads without any of these are a race on
hardware whatever the batching, and are not looked for.
"""

from __future__ import annotations

from ldssan.passes.ir.irview import Op, walk

from .report import where

AUTO_BATCH = 8  # workgroups per batch when independent (benchmarks/rows.py: 84 s -> 13 s)
# fence scopes that stay inside one workgroup (spelled as in passes/abi.SCOPES)
_LOCAL_SCOPES = frozenset({"workgroup", "workgroup-one-as", "wavefront", "wavefront-one-as", "singlethread"})
_LDS = 3


def _space(t) -> int:
    return t.width if getattr(t, "kind", "") == "ptr" else -1


def _scope(op: Op) -> str:
    return str(op.attr("syncscope", "") or "")  # "" is the system scope


def _dependence(op: Op) -> str | None:
    """What about `op` lets one workgroup observe another, or None."""
    name = op.name
    if name in ("llvm.atomicrmw", "llvm.cmpxchg"):
        return None if _space(op.operand_types[0]) == _LDS else "a global atomic"
    if "atomic" in name and not name.startswith("rocdl.ds"):
        return "a global atomic"
    if name in ("llvm.load", "llvm.store"):
        ptr = op.operand_types[0 if name == "llvm.load" else 1]
        if _space(ptr) != _LDS and (op.attr("ordering") or op.attr("volatile_")):
            return "an atomic or volatile global access (a flag)"
        return None
    if name == "llvm.fence":
        scope = _scope(op)
        return None if scope in _LOCAL_SCOPES else f"a fence of scope {scope or 'system'!r}"
    if "cluster" in name or (name.startswith("rocdl.s.barrier") and op.attr("id") == -3):
        return "a cluster op"
    if name == "rocdl.s.sleep":
        return "a sleep (a spin-wait on another workgroup)"
    return None


def dependence(view) -> str | None:
    """Why the workgroups of this module's kernels may depend on each other (the first such
    op, with its source line), or None when they are independent."""
    for fn in view.functions.values():
        for op in walk(fn.body):
            why = _dependence(op)
            if why is not None:
                at = where(op.loc.frame) if op.loc.frame else "an unknown line"
                return f"{why} ({op.name}) at {at} in @{fn.name}"
    return None


class AutoBatch:
    """Per host call, the batch for its module (callable: `hook.sanitize(batch=AutoBatch())`);
    remembers every decision so the plain runs can use the same one (`batch`)."""

    def __init__(self, size: int = AUTO_BATCH) -> None:
        self.size = size
        self.calls = 0
        self.refusal: str | None = None  # the first reason seen for batching off

    def __call__(self, view) -> int:
        self.calls += 1
        why = dependence(view)
        if why is not None and self.refusal is None:
            self.refusal = why
        return 1 if why is not None else self.size

    @property
    def batch(self) -> int:
        """The batch for a whole run: batched only when every call seen was independent."""
        return self.size if self.calls and self.refusal is None else 1

    @property
    def reason(self) -> str:
        if not self.calls:
            return "auto: no kernel launch seen, one workgroup per batch"
        if self.refusal is not None:
            return f"auto: workgroups may depend on each other: {self.refusal}"
        return "auto: workgroups independent (no global atomics, flags, device fences or cluster ops)"

"""Fence-pairing lint: split barriers must be bracketed by workgroup fences (LDS040 / LDS041).

On gfx1250 a raw `s_barrier_signal` / `s_barrier_wait` carries no memory semantics; the
memory model (BAR-MM) pairs a signal with a release fence program-ordered before it and a
wait with an acquire fence after it. The dynamic engine cannot see a missing fence when
nothing races in program order today (the compiler happens to keep the loads below the
wait), so this check reads the instrumented kernel instead:

* LDS040 missing-release: on some path from an LDS store to a signal (since the previous
  signal) there is no draining release fence and no `s_wait_dscnt 0`;
* LDS041 missing-acquire: on some path from a wait to an LDS load or store (before the next
  wait) there is no draining acquire fence. A store counts too: without the acquire it may be
  hoisted above the wait, past another wave's load of the old value before its signal (a
  write-after-read the barrier was there to order).

A fence counts only when `abi.fence_drains` says it drains (the emulator and the engine
use the same decision), so `one-as`, wavefront and singlethread fences do not. Fenced
barrier forms (`gpu.barrier`, `rocdl.barrier`) are their own release and acquire.

The check runs on the hook calls the pass inserted (the events both executors see), over
the still-structured IR: `scf.if` arms join, loops iterate to a fixpoint so a load at the
top of a body pairs with the wait at the bottom of the previous iteration. Async and TDM
copies are not fence-ordered on gfx1250 (their counters are waited explicitly), so only
ds accesses take part.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir.errors import LdssanError
from .abi import ORDERINGS, SCOPES, BarrierForm, Counter, DsKind, fence_drains

MISSING_RELEASE = "LDS040"
MISSING_ACQUIRE = "LDS041"

_RELEASING = frozenset({"release", "acq_rel", "seq_cst"})
_ACQUIRING = frozenset({"acquire", "acq_rel", "seq_cst"})


class LintError(LdssanError, RuntimeError):
    """The lint met IR it cannot read (a hook call whose operands are not constants)."""


@dataclass(frozen=True, order=True)
class Finding:
    code: str  # MISSING_RELEASE | MISSING_ACQUIRE
    access: int  # site id of the LDS store (LDS040) or access (LDS041)
    barrier: int  # site id of the signal (LDS040) or wait (LDS041)

    def to_dict(self, kernel: str) -> dict:
        return {"code": self.code, "access": self.access, "barrier": self.barrier, "kernel": kernel}


# -- the abstract program: events in sequence, branches, loops ------------------------------

@dataclass(frozen=True)
class Event:
    what: str  # store | load | release | acquire | signal | wait
    site: int


@dataclass(frozen=True)
class Branch:
    arms: tuple[tuple, ...]  # one sequence runs (an empty arm: nothing runs)


@dataclass(frozen=True)
class Loop:
    body: tuple  # runs zero or more times


@dataclass(frozen=True)
class _State:
    pending: frozenset  # store sites not yet released
    open: frozenset  # wait sites not yet acquired

    def join(self, other: "_State") -> "_State":
        return _State(self.pending | other.pending, self.open | other.open)


_EMPTY = _State(frozenset(), frozenset())


def analyze(program: tuple) -> list[Finding]:
    """Every (access, barrier) pair that some path leaves unfenced, sorted."""
    found: set[Finding] = set()
    _run(program, _EMPTY, found)
    return sorted(found)


def _run(items, state: _State, found: set) -> _State:
    for item in items:
        if isinstance(item, Event):
            state = _step(item, state, found)
        elif isinstance(item, Branch):
            out = None
            for arm in item.arms:
                s = _run(arm, state, found)
                out = s if out is None else out.join(s)
            state = out if out is not None else state
        else:  # Loop: the state at the head is the join over any number of iterations
            head = state
            while True:
                nxt = state.join(_run(item.body, head, found))
                if nxt == head:
                    break
                head = nxt
            state = head
    return state


def _step(ev: Event, s: _State, found: set) -> _State:
    what = ev.what
    if what == "store":
        found.update(Finding(MISSING_ACQUIRE, ev.site, w) for w in s.open)
        return _State(s.pending | {ev.site}, s.open)
    if what == "load":
        found.update(Finding(MISSING_ACQUIRE, ev.site, w) for w in s.open)
        return s
    if what == "release":
        return _State(frozenset(), s.open)
    if what == "acquire":
        return _State(s.pending, frozenset())
    if what == "signal":
        found.update(Finding(MISSING_RELEASE, st, ev.site) for st in s.pending)
        return _State(frozenset(), s.open)  # later stores belong to the next signal
    if what == "wait":
        return _State(s.pending, frozenset({ev.site}))  # a new phase: later loads pair with it
    raise LintError(f"ldssan lint: unknown event {what!r}")


# -- reading the instrumented IR (MLIR Python bindings) --------------------------------------

def lint_function(fn) -> list[Finding]:
    """The findings for one instrumented `gpu.func` operation."""
    return analyze(_region(fn.regions[0]))


def _region(region) -> tuple:
    blocks = list(region.blocks)
    if len(blocks) == 1:
        return _block(blocks[0])
    if not blocks:
        return ()
    # Unstructured control flow: any block may follow any other (over-approximate).
    return (Loop(tuple(Branch((_block(b), ())) for b in blocks)),)


def _block(block) -> tuple:
    out: list = []
    for op in block.operations:
        op = getattr(op, "operation", op)
        if op.name == "llvm.call":
            out.extend(_hook_events(op))
        elif len(op.regions):
            out.extend(_structured(op))
    return tuple(out)


def _structured(op) -> tuple:
    regions = [_region(r) for r in op.regions]
    if op.name == "scf.if":
        return (Branch(tuple(regions) + ((),) * (2 - len(regions))),)
    if op.name == "scf.while":  # (before after)* before
        before, after = regions
        return (Loop(before + after),) + before
    if op.name in ("scf.for", "scf.forall", "scf.parallel"):
        return (Loop(regions[0]),)
    # Any other region op: each region may run any number of times, in any order.
    return (Loop(tuple(Branch((r, ())) for r in regions)),)


def _const(op, index: int) -> int:
    value = op.operands[index]
    owner = getattr(value.owner, "operation", value.owner)
    if getattr(owner, "name", None) != "arith.constant":
        raise LintError(f"ldssan lint: operand {index} of a {op.name} hook call is not a constant")
    return int(str(owner.attributes["value"]).split(":")[0])


def _hook_events(op) -> tuple:
    callee = str(op.attributes["callee"]).lstrip("@")
    if callee == "__ldssan_ds":
        site, kind = _const(op, 0), _const(op, 3)
        if kind == DsKind.READ:
            return (Event("load", site),)
        if kind == DsKind.WRITE:
            return (Event("store", site),)
        return (Event("load", site), Event("store", site))  # an atomic reads and writes
    if callee == "__ldssan_wait":
        if _const(op, 1) == Counter.DS and _const(op, 2) == 0:
            return (Event("release", _const(op, 0)),)
        return ()
    if callee == "__ldssan_fence":
        site, ordering, scope = _const(op, 0), ORDERINGS.get(_const(op, 1), ""), _const(op, 2)
        if not 0 <= scope < len(SCOPES) or not fence_drains(ordering, SCOPES[scope]):
            return ()
        return tuple(Event(what, site) for what, kinds in (("release", _RELEASING), ("acquire", _ACQUIRING))
                     if ordering in kinds)
    if callee == "__ldssan_barrier":
        return _BARRIER_EVENTS[BarrierForm(_const(op, 1))](_const(op, 0))
    return ()


_BARRIER_EVENTS = {
    BarrierForm.FENCED_ARRIVE: lambda s: (Event("release", s), Event("signal", s)),
    BarrierForm.FENCED_DONE: lambda s: (Event("wait", s), Event("acquire", s)),
    BarrierForm.SIGNAL: lambda s: (Event("signal", s),),
    BarrierForm.WAIT: lambda s: (Event("wait", s),),
    BarrierForm.BARE_ARRIVE: lambda s: (Event("signal", s),),
    BarrierForm.BARE_DONE: lambda s: (Event("wait", s),),
}

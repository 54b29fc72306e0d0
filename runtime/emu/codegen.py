"""Translate one kernel function into a Python generator that runs one wave.

Generated code shape (one function per kernel, cached by IR hash):

    def wave(ctx, args):          # a generator; `yield` = a scheduling point
        M0 = ctx.mask             # exec mask, bool (L,)
        v0, v1 = args             # kernel arguments (uniform)
        v2 = ctx.tid[0]           # one or a few lines per op ...
        v3 = R.lds_load(ctx, v2, np.dtype('int32'), 1, M0)[:, 0]
        ctx.sync_mask = M0
        yield EV0  # Barrier(bid=-1): barriers, waits and copy issues yield to the scheduler

Names: `v<N>` is SSA value N, `M<k>` an exec mask, `t<k>` a temporary. `R` is the
run-time package (`rt/`), `np` numpy, `EV<k>` an event for the scheduler (events.py,
`Translator.yield_event`). Each generated line remembers the op it came from,
so an exception while translating or running names the op and its Python source line
(`Program.failure`, `errors.fail_closed`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ldssan.passes.ir.caches import register_reset
from . import rt, taint as _taint
from .events import ISSUE_TENSOR
from ldssan.passes.ir.irview import Block, Function, Loc, ModuleView, Op
from .ops import load_all
from ldssan.passes.ir.types import Type
from .errors import EmulationError, UnsupportedOp, fail_closed
from .native import NativeBuildError, Planner, cached as native_cached, estimate_seconds as native_compile_seconds, load as load_native
from .uniformity import analyze, lockstep_refusal, split_possible

__all__ = ["EmulationError", "Program", "Translator", "UnsupportedOp", "build_deferred", "clear_cache",
           "translate", "translate_lockstep"]


@dataclass
class NativeSummary:
    """The compiled/interpreted split of a translation (launch records carry it)."""

    runs: list  # native.NativeRun
    compiled_ops: int  # ops inside native runs
    python_ops: int  # lane-wise ops left in Python: runs too short
    interpreted: dict = field(default_factory=dict)  # op name -> ops the planner left to Python
    why: str = ""  # the runs are not built (they run as Python): why
    # a deferred build: the C, and the lane-ops its runs may run as Python before it is
    # compiled (`owe`); None once built or failed
    source: str | None = None
    build_at: float = 0.0
    owed: float = 0.0
    waited: int = 0  # calls that ran as Python while the build was deferred

    def calls(self) -> int:
        return sum(r.calls for r in self.runs)

    def build(self) -> None:
        """Compile and bind the runs now (if not done): on a failure they stay Python, `why` says why."""
        source, self.source = self.source, None
        if source is None:
            return
        for run in self.runs:
            run.lazy = None
        try:
            lib = load_native(source)
            for run in self.runs:
                run.bind(lib)
        except NativeBuildError as exc:
            self.why = str(exc).splitlines()[0]

    def owe(self, work: float) -> bool:
        """A run would have done `work` lane-ops natively but ran as Python: once the owed
        work is worth the compile (`build_at`, ski rental: at most twice the better choice's
        cost), build. True when the runs are bound now."""
        self.owed += work
        self.waited += 1
        if self.owed < self.build_at:
            return False
        self.build()
        return not self.why

    def as_dict(self, calls: int, waited: int = 0) -> dict:
        """The split, with `calls` native calls made by one launch and `waited` run as Python
        while the build was deferred."""
        out = {"runs": len(self.runs), "compiled_ops": self.compiled_ops, "python_lane_ops": self.python_ops,
               "calls": calls, "fallbacks": sum(r.fallbacks for r in self.runs)}
        if waited:
            out["python_calls_before_build"] = waited
        if self.interpreted:  # what cuts the runs, most frequent first
            top = sorted(self.interpreted.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
            out["interpreted"] = dict(top)
        if self.why:
            out["not_built"] = self.why
        return out


@dataclass
class Program:
    """A translated kernel: the generator factory and what it needs to run."""

    name: str
    source: str
    wave_fn: object
    line_ops: dict[int, tuple[str, Loc]]
    n_args: int
    filename: str
    # batched: a sync event may reach some of a batch's workgroups only (`split.BatchSplit`)
    may_split: bool = False
    native: "NativeSummary | None" = None  # lockstep with native runs: what is compiled

    def op_at(self, lineno: int) -> tuple[str, Loc] | None:
        return self.line_ops.get(lineno)

    def failing_op(self, exc: BaseException) -> tuple[str, Loc] | None:
        """The op whose generated line raised `exc` (the innermost such line)."""
        at = None
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                at = self.op_at(tb.tb_lineno) or at
            tb = tb.tb_next
        return at

    def failure(self, exc: Exception, who: str, where: str = "") -> Exception:
        """The error to raise for `exc` escaping this program run by `who` (e.g. "wave 0"),
        fail-closed (`errors.fail_closed`) and noted with the op, or `where` when no op of the
        program is on the traceback."""
        at = self.failing_op(exc)
        err = fail_closed(exc, at, f"{who} of kernel {self.name}")
        place = f"'{at[0]}' at {at[1]}" if at else where or f"kernel {self.name}"
        err.add_note(f"ldssan-emu: while running {who} of kernel {self.name}: {place}")
        return err


class Translator:
    def __init__(self, view: ModuleView, fn: Function, *, batched: bool = False, taint: bool = False,
                 lockstep: bool = False, native: bool = False):
        self.view = view
        self.lockstep = lockstep  # the waves of a workgroup as one lane array (wave.LockstepCtx)
        # `ldssan rows`: kernels get taint lines (`taint.emit`); the host function never does
        self.taint = taint and fn.kind == "gpu.func"
        self.batched = batched
        self.fn = fn
        self.emitters = load_all()
        self.lines: list[str] = []
        self.line_ops: dict[int, tuple[str, Loc]] = {}
        self.depth = 1
        self.mask = "M0"
        self.types: dict[int, Type] = {}
        self.consts: dict[int, int] = {}  # integer constants by value id (ops/arith.py `constant`)
        self.splats: dict[int, int] = {}  # integer vector constants of one value (`dense<16>`), by value id
        self._tmp = itertools.count(1)  # M0 is the entry mask
        self.cur_op: Op | None = None
        args = fn.body[0].args if fn.body else ()
        self.uni = analyze(fn.body, batched=batched, lockstep=lockstep)
        self.arg_ids = args
        self.events: dict[str, object] = {}  # the events the code yields, by their names in it
        self._event_names: dict[tuple, str] = {}
        # called functions (ops/llvm.py `call`): one generator per callee and uniformity of its
        # arguments, written after the kernel's, in the same source
        self._callees: dict[tuple[str, tuple[bool, ...]], str] = {}
        self._pending: list[tuple[Function, tuple[bool, ...], str]] = []
        # lockstep: runs of lane-wise ops compiled to C (native/plan.py), called by these names
        self.natives: dict[str, object] = {}
        self.planner = Planner(self, fn.body) if native and lockstep and not self.taint else None

    def yield_event(self, ev, *, masked: bool = False) -> None:
        """Write a scheduling point: yield `ev` (events.py) to the scheduler; `masked`: the
        wave reaches it under the current exec mask (`ctx.sync_mask`). Each event is built
        once per translation, not at every yield (the scheduler's hot path)."""
        key = (type(ev), ev)  # by type too: events of two types may be equal tuples
        name = self._event_names.get(key)
        if name is None:
            name = self._event_names[key] = f"EV{len(self.events)}"
            self.events[name] = ev
        if masked:
            self.out(f"ctx.sync_mask = {self.mask}")
        self.out(f"yield {name}  # {ev!r}")

    # -- helpers used by emitters ------------------------------------------------------------
    def v(self, vid: int) -> str:
        return f"v{vid}"

    def uniform(self, vid: int) -> bool:
        return self.uni.is_uniform(vid)

    def narrowed(self, expr: str, outer: str) -> str:
        """A branch or loop mask expression; under lockstep kept as the `outer` object while
        it is all of `outer` (`rt.narrow`), so whole-wave fast paths still apply inside."""
        return f"R.narrow({expr}, {outer})" if self.lockstep else expr

    def tmp(self, prefix: str = "t") -> str:
        return f"{prefix}{next(self._tmp)}"

    def out(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)
        if self.cur_op is not None:
            self.line_ops[len(self.lines)] = (self.cur_op.name, self.cur_op.loc)

    def lanes(self, vid: int) -> str:
        """Expression for value `vid` in per-lane shape (broadcast if uniform)."""
        return self.v(vid) if not self.uniform(vid) else f"R.lanes({self.v(vid)}, L)"

    def as_shape(self, vid: int, uniform: bool) -> str:
        """Expression for `vid` in the shape a destination of the given uniformity expects."""
        if uniform or not self.uniform(vid):
            return self.v(vid)
        return f"R.lanes({self.v(vid)}, L)"

    def taint_set(self, dst: str, *srcs: str) -> None:
        """Taint mode only: variable `dst`'s taint is the OR of the `srcs` variables' taints."""
        if self.taint:
            self.out(f"T{dst} = " + (" | ".join(f"T{s}" for s in srcs) or "0"))

    def unsupported(self, op: Op, detail: str = "") -> UnsupportedOp:
        return UnsupportedOp(op.name, op.loc, detail)

    # -- structure ---------------------------------------------------------------------------
    def block(self, blk: Block) -> None:
        self.count_ops(blk)
        self.ops(blk.ops)

    def ops(self, ops: list[Op]) -> None:
        """Emit consecutive ops of one block (lane-wise runs in C with a planner)."""
        if self.planner is not None:
            self.planner.block(ops)
            return
        for op in ops:
            self.op(op)

    def count_ops(self, blk: Block) -> None:
        """Count the block's ops once per entry (feeds the wave-op / lane-op figures)."""
        n = sum(1 for op in blk.ops if op.name not in ("scf.yield", "scf.condition"))
        if n:
            self.out(f"ctx.nops += {n}")

    def op(self, op: Op) -> None:
        emit = self.emitters.get(op.name)
        if self.lockstep and op.name in _LOCKSTEP_EMITTERS:
            emit = _LOCKSTEP_EMITTERS[op.name]
        if emit is None:
            raise self.unsupported(op, "the virtual gfx1250 has no emitter for this op (`ldssan env` lists the "
                                       "supported ops); unsupported op: please report")
        prev, self.cur_op = self.cur_op, op
        for r, t in zip(op.results, op.result_types):
            self.types[r] = t
        try:
            emit(self, op)
            if self.taint:
                _taint.emit(self, op)
        except Exception as exc:
            err = fail_closed(exc, (op.name, op.loc), f"translating @{self.fn.name}")
            if err is exc:
                raise
            raise err from exc
        finally:
            self.cur_op = prev

    def indented(self):
        return _Indent(self)

    def call_function(self, op: Op, fn: Function) -> None:
        """A call of `fn` (a body in the module): `yield from` its generator, translated once
        per uniformity of its arguments, under the current exec mask -- what the inlined
        body would do, for a module that holds it once."""
        if self.lockstep or self.taint:
            raise self.unsupported(op, "a called function runs per wave only (no lockstep, no taint)")
        if op.results:
            raise self.unsupported(op, f"call of @{fn.name} with results")
        if len(fn.body) != 1 or len(fn.body[0].args) != len(op.operands):
            raise self.unsupported(op, f"call of @{fn.name}: its body is not one block of {len(op.operands)} "
                                       "parameters")
        shape = tuple(self.uniform(a) for a in op.operands)
        name = self._callees.get((fn.name, shape))
        if name is None:
            name = self._callees[(fn.name, shape)] = f"F{len(self._callees)}_{fn.name}"
            self._pending.append((fn, shape, name))
        args = "".join(f"{self.v(a)}, " for a in op.operands)
        self.out(f"yield from {name}(ctx, {self.mask}, ({args}))")

    def _translate_callees(self) -> None:
        """Each pending callee as a generator `F<k>_<name>(ctx, M0, args)` (its own
        uniformity, with the arguments as the call site had them)."""
        while self._pending:
            fn, shape, name = self._pending.pop(0)
            entry = fn.body[0]
            saved = (self.fn, self.uni, self.mask, self.depth)
            self.fn, self.mask, self.depth = fn, "M0", 0
            self.uni = analyze(fn.body, batched=self.batched, lockstep=self.lockstep,
                               varying_args=tuple(a for a, u in zip(entry.args, shape) if not u))
            for a, ty in zip(entry.args, entry.arg_types):
                self.types[a] = ty
            self.out(f"def {name}(ctx, M0, args):")
            self.depth = 1
            self.out("L = ctx.L")
            if entry.args:
                self.out(f"({', '.join(self.v(a) for a in entry.args)},) = args")
            self.block(entry)
            self.out("return")
            self.out("yield")  # a generator even without scheduling points
            self.fn, self.uni, self.mask, self.depth = saved

    def translate(self) -> str:
        fn = self.fn
        if fn.external:
            raise UnsupportedOp(fn.kind, fn.loc, f"function @{fn.name} has no body")
        if len(fn.body) != 1:
            raise UnsupportedOp(fn.kind, fn.loc, "unstructured control flow (several blocks); "
                                "the emulator runs the structured (scf) stage")
        entry = fn.body[0]
        for a, t in zip(entry.args, entry.arg_types):
            self.types[a] = t
        self.lines.append("def wave(ctx, args):")
        self.out("L = ctx.L")
        self.out("M0 = ctx.mask")
        if entry.args:
            names = ", ".join(self.v(a) for a in entry.args)
            self.out(f"({names},) = args")
            for a in entry.args:
                self.taint_set(self.v(a))
        self.block(entry)
        self.out("return")
        self.out("yield")  # makes `wave` a generator even without scheduling points
        self._translate_callees()
        return "\n".join(self.lines) + "\n"


def _lockstep_tensor_copy(t: Translator, op: Op) -> None:
    # A TDM op is issued once per wave, with that wave's descriptor: under lockstep only the
    # waves with an active lane issue it (a per-wave run skips it in the others).
    g = ", ".join(t.v(x) for x in op.operands[:4])
    t.out(f"ctx.tdm(R.tdm_copy, {t.mask}, {g}, {op.name.endswith('to.lds')})")
    t.yield_event(ISSUE_TENSOR)


_LOCKSTEP_EMITTERS = {"rocdl.tensor.load.to.lds": _lockstep_tensor_copy,
                      "rocdl.tensor.store.from.lds": _lockstep_tensor_copy}


class _Indent:
    def __init__(self, t: Translator):
        self.t = t

    def __enter__(self):
        self.t.depth += 1

    def __exit__(self, *exc):
        self.t.depth -= 1


_CACHE: dict[str, Program] = {}  # translations by IR key; cleared by ldssan.runtime.reset_caches()


def translate(view: ModuleView, fn_name: str, *, batched: bool = False, lockstep: bool = False,
              native: bool = False, cache_key: str | None = None) -> Program:
    """Translate `fn_name` of `view` (cached by `cache_key`, normally the IR hash); `lockstep`:
    for a `wave.LockstepCtx` (never with taint: `ldssan rows` runs per wave); `native`
    (lockstep only): runs of lane-wise ops compiled to C (native/)."""
    taint = _taint.current() is not None
    if taint and lockstep:
        raise ValueError("ldssan-emu: lockstep code is never translated with taint")
    if cache_key is not None:
        cache_key = (f"{cache_key}:{int(batched)}" + (":lockstep" if lockstep else "") + (":taint" if taint else "")
                     + (":native" if native and lockstep else ""))
        if cache_key in _CACHE:
            return _CACHE[cache_key]
    fn = view.functions[fn_name]
    tr = Translator(view, fn, batched=batched, taint=taint, lockstep=lockstep, native=native)
    source = tr.translate()
    filename = f"<ldssan-emu:{fn_name}>"
    namespace = {"R": rt, "np": np, **tr.events, **tr.natives}
    exec(compile(source, filename, "exec"), namespace)
    prog = Program(
        name=fn_name, source=source, wave_fn=namespace["wave"], line_ops=tr.line_ops,
        n_args=len(fn.body[0].args), filename=filename,
        may_split=batched and split_possible(fn.body), native=_build_native(tr.planner),
    )
    if cache_key is not None:
        _CACHE[cache_key] = prog
    return prog


SAVED_PER_LANE_OP_S = 2.5e-9  # a lane-op in numpy (2-5 ns) against native (~0.3 ns), measured on RMSNorm


def _build_native(planner: Planner | None) -> NativeSummary | None:
    """Compile the translation's native runs (one module); if they cannot be built they stay
    unbound and run as Python, the reason kept for the launch record."""
    if planner is None:
        return None
    summary = NativeSummary(planner.runs, planner.compiled_ops, planner.python_ops, dict(planner.interpreted))
    if not planner.runs:
        return summary
    summary.source = planner.source()
    if native_cached(summary.source):
        summary.build()  # loading a cached object costs milliseconds
        return summary
    # not compiled on this machine yet: the runs start as Python and build once the work
    # they ran as Python (lane-ops, at ~2.5 ns each saved) is worth the compile's seconds; a
    # kernel launched once or twice never pays for a compile (FLYDSL_LDSSAN_NATIVE=on builds at once)
    summary.build_at = native_compile_seconds(summary.source) / SAVED_PER_LANE_OP_S
    for run in planner.runs:
        run.lazy = summary
    return summary


_REFUSALS: dict[str, str | None] = {}  # lockstep refusals by IR key (None: lockstep runs it)


def translate_lockstep(view: ModuleView, fn_name: str, *, batched: bool, native: bool = False,
                       cache_key: str | None = None) -> tuple[Program | None, str | None]:
    """The lockstep translation of kernel `fn_name` (`wave.LockstepCtx`), or None and why the
    kernel cannot run in lockstep: `uniformity.lockstep_refusal`, or an op with no lockstep
    form (the per-wave translation then names it if it has none there either)."""
    key = f"{cache_key}:{int(batched)}" if cache_key is not None else None
    why = _REFUSALS.get(key, "") if key is not None else ""
    if why == "":  # not decided yet
        why = lockstep_refusal(view.functions[fn_name].body, batched)
        if key is not None:
            _REFUSALS[key] = why
    if why is not None:
        return None, why
    try:
        return translate(view, fn_name, batched=batched, lockstep=True, native=native, cache_key=cache_key), None
    except (EmulationError, NotImplementedError) as exc:
        why = f"no lockstep translation: {str(exc).splitlines()[0]}"
        if key is not None:
            _REFUSALS[key] = why
        return None, why


def build_deferred() -> None:
    """Compile every translation's deferred native runs now (benchmarks measure the steady
    state: their warm-up call builds what a long run would have built)."""
    for prog in list(_CACHE.values()):
        if prog.native is not None:
            prog.native.build()


@register_reset
def clear_cache() -> None:
    """Forget every translated program (tests; a process that reloads emitters)."""
    _CACHE.clear()
    _REFUSALS.clear()

"""Translate one kernel function into a Python generator that runs one wave.

Generated code shape (one function per kernel, cached by IR hash):

    def wave(ctx, args):          # a generator; `yield` = a scheduling point
        M0 = ctx.mask             # exec mask, bool (L,)
        v0, v1 = args             # kernel arguments (uniform)
        v2 = R.thread_id(ctx, 0)  # one or a few lines per op ...
        yield R.barrier(...)      # barriers, waits and copy issues yield to the scheduler

Names: `v<N>` is SSA value N, `M<k>` an exec mask, `t<k>` a temporary. `R` is the
runtime library (`rt.py`), `np` numpy. Each generated line remembers the op it came from,
so an exception while running names the op and its Python source line.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field

import numpy as np

from . import rt
from ldssan.passes.ir.irview import Block, Function, Loc, ModuleView, Op
from .ops import load_all
from ldssan.passes.ir.types import Type
from .uniformity import analyze


class UnsupportedOp(NotImplementedError):
    """The virtual gfx1250 has no implementation for an op (raised at translation)."""

    def __init__(self, op_name: str, loc: Loc, detail: str = ""):
        self.op_name = op_name
        self.loc = loc
        more = f": {detail}" if detail else ""
        super().__init__(f"ldssan-emu: no implementation for '{op_name}' at {loc}{more}")


@dataclass
class Program:
    """A translated kernel: the generator factory and what it needs to run."""

    name: str
    source: str
    wave_fn: object
    line_ops: dict[int, tuple[str, Loc]]
    n_args: int
    filename: str
    stats: dict = field(default_factory=dict)

    def op_at(self, lineno: int) -> tuple[str, Loc] | None:
        return self.line_ops.get(lineno)


class Translator:
    def __init__(self, view: ModuleView, fn: Function, *, batched: bool = False):
        self.view = view
        self.batched = batched
        self.fn = fn
        self.emitters = load_all()
        self.lines: list[str] = []
        self.line_ops: dict[int, tuple[str, Loc]] = {}
        self.depth = 1
        self.mask = "M0"
        self.types: dict[int, Type] = {}
        self._tmp = itertools.count(1)  # M0 is the entry mask
        self.cur_op: Op | None = None
        self.stats = {"ops": 0, "yields": 0}
        args = fn.body[0].args if fn.body else ()
        self.uni = analyze(fn.body, batched=batched)
        self.arg_ids = args

    # -- helpers used by emitters ------------------------------------------------------------
    def v(self, vid: int) -> str:
        return f"v{vid}"

    def uniform(self, vid: int) -> bool:
        return self.uni.is_uniform(vid)

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

    def results_uniform(self, op: Op) -> bool:
        return all(self.uniform(r) for r in op.results)

    def unsupported(self, op: Op, detail: str = "") -> UnsupportedOp:
        return UnsupportedOp(op.name, op.loc, detail)

    def mark_yield(self) -> None:
        self.stats["yields"] += 1

    # -- structure ---------------------------------------------------------------------------
    def block(self, blk: Block) -> None:
        self.count_ops(blk)
        for op in blk.ops:
            self.op(op)

    def count_ops(self, blk: Block) -> None:
        """Count the block's ops once per entry (feeds the wave-op / lane-op figures)."""
        n = sum(1 for op in blk.ops if op.name not in ("scf.yield", "scf.condition"))
        if n:
            self.out(f"ctx.nops += {n}")

    def op(self, op: Op) -> None:
        emit = self.emitters.get(op.name)
        if emit is None:
            raise self.unsupported(op)
        prev, self.cur_op = self.cur_op, op
        self.stats["ops"] += 1
        for r, t in zip(op.results, op.result_types):
            self.types[r] = t
        try:
            emit(self, op)
        finally:
            self.cur_op = prev

    def indented(self):
        return _Indent(self)

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
        self.block(entry)
        self.out("return")
        self.out("yield")  # makes `wave` a generator even without scheduling points
        return "\n".join(self.lines) + "\n"


class _Indent:
    def __init__(self, t: Translator):
        self.t = t

    def __enter__(self):
        self.t.depth += 1

    def __exit__(self, *exc):
        self.t.depth -= 1


_CACHE: dict[str, Program] = {}


def ir_hash(view_text: str, fn_name: str) -> str:
    return hashlib.sha256(f"{fn_name}\n{view_text}".encode()).hexdigest()[:20]


def translate(view: ModuleView, fn_name: str, *, batched: bool = False,
              cache_key: str | None = None) -> Program:
    """Translate `fn_name` of `view` (cached by `cache_key`, normally the IR hash)."""
    if cache_key is not None:
        cache_key = f"{cache_key}:{int(batched)}"
        if cache_key in _CACHE:
            return _CACHE[cache_key]
    fn = view.functions[fn_name]
    tr = Translator(view, fn, batched=batched)
    source = tr.translate()
    filename = f"<ldssan-emu:{fn_name}>"
    namespace = {"R": rt, "np": np}
    exec(compile(source, filename, "exec"), namespace)
    prog = Program(
        name=fn_name, source=source, wave_fn=namespace["wave"], line_ops=tr.line_ops,
        n_args=len(fn.body[0].args), filename=filename, stats=dict(tr.stats),
    )
    if cache_key is not None:
        _CACHE[cache_key] = prog
    return prog


def clear_cache() -> None:
    _CACHE.clear()

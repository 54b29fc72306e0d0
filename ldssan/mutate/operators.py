"""One-line mutation operators, in a decorated registry (name -> finder, one-line description).

Each operator walks a `KernelSource` and yields the `Site`s where it applies; every site
changes exactly one source line, except `wait-after-consumer` and `store-below-barrier`,
which move a statement and so swap two adjacent statements. `find_mutants` turns the sites of the chosen operators
into `Mutant`s with stable ids (`operator:line`, `.2`, `.3` for further sites on a line).

The bug classes they model are described in docs/bug-patterns.md (one section per
operator); the "model" of each operator names the class and its public bug reports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterable

from ldssan.variants import Edit

from .source import COMPILE_TIME_GUARDS, COUNT_KEYWORDS, RANGE_CALLS, KernelSource, Site, Sync, final_name


@dataclass(frozen=True)
class Operator:
    name: str
    description: str  # one line
    model: str  # the catalogue rows / public bugs it models
    find: Callable[[KernelSource], Iterable[Site]]


OPERATORS: dict[str, Operator] = {}


def operator(name: str, description: str, model: str = ""):
    """Register a site finder under `name` (registering a name twice is an error)."""

    def register(fn):
        if name in OPERATORS:
            raise ValueError(f"mutation operator {name!r} registered twice")
        OPERATORS[name] = Operator(name, description, model, fn)
        return fn

    return register


def _paren(src: KernelSource, node: ast.expr) -> str:
    text = src.segment(node)
    atomic = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)
    return text if isinstance(node, atomic) else f"({text})"


def _is_minus_one(node: ast.AST) -> bool:
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Constant)
            and node.right.value == 1)


def _count_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg in COUNT_KEYWORDS:
            return kw.value
    return None


# ----------------------------------------------------------------------------- operators

_DELETABLE = {Sync.BARRIER, Sync.CLUSTER_BARRIER, Sync.SIGNAL, Sync.SPLIT_WAIT, Sync.WAIT, Sync.WAIT_BARRIER,
              Sync.WAIT_SIGNAL, Sync.FENCE}


@operator("delete-sync", "delete a barrier, wait or fence statement",
          "missing barrier / wait / fence (publication, refill, copy wait, final TDM-store wait)")
def _delete_sync(src: KernelSource):
    for stmt, call, kind in src.sync_statements(_DELETABLE):
        yield src.delete(stmt, f"delete {kind.value} `{src.segment(call)}`")


def _wait_counts(src: KernelSource, delta: int):
    for _stmt, call, kind in src.sync_statements({Sync.WAIT, Sync.WAIT_BARRIER, Sync.WAIT_SIGNAL}):
        arg = _count_arg(call)
        if arg is None or not src.one_line(arg):
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
            if arg.value + delta < 0:
                continue
            new = str(arg.value + delta)
        else:
            new = ast.unparse(ast.BinOp(arg, ast.Add() if delta > 0 else ast.Sub(), ast.Constant(abs(delta))))
        yield src.replace(arg, new, f"{kind.value} count `{src.segment(arg)}` -> `{new}`")


@operator("wait-plus-one", "raise a wait's count by one (one more op may still be in flight)",
          "a wait count that assumes too few later ops; aiter #6170 'vmcnt(5) assumption', #6368")
def _wait_plus_one(src: KernelSource):
    yield from _wait_counts(src, +1)


@operator("wait-minus-one", "lower a wait's count by one (over-waiting: normally equivalent)",
          "over-waiting (often compiler-masked); a control for equivalent mutants")
def _wait_minus_one(src: KernelSource):
    yield from _wait_counts(src, -1)


@operator("raw-split-barrier", "replace a fenced barrier by a raw s_barrier_signal/s_barrier_wait pair",
          "barrier with no memory semantics; aiter #6344/#6348 (ds_store then s_barrier_signal without s_wait_dscnt)")
def _raw_split(src: KernelSource):
    if src.rocdl is None:
        return
    raw = f"{src.rocdl}.s_barrier_signal(-1); {src.rocdl}.s_barrier_wait(-1)"
    for stmt, call, _kind in src.sync_statements({Sync.BARRIER}):
        yield src.replace(stmt, raw, f"`{src.segment(call)}` -> raw split barrier, no fences, no dscnt wait")


@operator("wait-after-consumer", "move a wait or barrier one statement later, after the statement that consumes it",
          "wait after its consumer; aiter #5418 'wait one instruction too late', rocm-libraries #10653")
def _wait_late(src: KernelSource):
    kinds = {Sync.WAIT, Sync.SPLIT_WAIT, Sync.BARRIER, Sync.WAIT_BARRIER}
    for stmt, call, kind in src.sync_statements(kinds):
        nxt = src.next_sibling(stmt)
        if nxt is not None and src.is_consumer(nxt):
            yield src.swap_with_next(stmt, nxt, f"{kind.value} `{src.segment(call)}` moved below "
                                                f"`{src.segment(nxt)}`")


@operator("ring-early", "re-use a ring slot one stage early (prefetch distance or prologue depth + 1)",
          "slot reused one stage early; aiter #4537 ring over-fill, rocm-libraries #11779")
def _ring_early(src: KernelSource):
    for node in ast.walk(src.tree):
        if not src.in_device(node):
            continue
        if isinstance(node, ast.Call) and final_name(node.func) in RANGE_CALLS:
            for arg in node.args:
                if _is_minus_one(arg):
                    yield src.replace(arg, src.segment(arg.left), f"`{src.segment(node)}` runs one more "
                                                                  f"stage (one more slot in flight)")
        elif _is_minus_one(node) and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Add) \
                and src.uses_loop_var(node.left):
            yield src.replace(node, src.segment(node.left), f"prefetch `{src.segment(node)}` one stage ahead")


@operator("swap-ping-pong", "swap a ping-pong / ring index: the slot of the next iteration",
          "wrong stage (consumer slot kt % nb -> (kt+1) % nb; gemm1 cur_off/nxt_off)")
def _swap_ping_pong(src: KernelSource):
    for node in ast.walk(src.tree):
        if not (src.in_device(node) and isinstance(node, ast.BinOp)):
            continue
        if isinstance(node.op, ast.Mod) and src.uses_loop_var(node.left) and not _is_minus_one(node.left) \
                and not src.inside(node, ast.Compare):
            new = f"({src.segment(node.left)} + 1) % {_paren(src, node.right)}"
            yield src.replace(node, new, f"slot `{src.segment(node)}` -> `{new}`")
        elif isinstance(node.op, ast.Sub) and isinstance(node.left, ast.Constant) and node.left.value == 1 \
                and isinstance(node.right, ast.Name) and src.uses_loop_var(node.right):
            yield src.replace(node, node.right.id, f"ping-pong `{src.segment(node)}` -> `{node.right.id}`")
        elif isinstance(node.op, ast.BitXor) and isinstance(node.right, ast.Constant) and node.right.value == 1 \
                and isinstance(node.left, ast.Name) and src.uses_loop_var(node.left):
            yield src.replace(node, node.left.id, f"ping-pong `{src.segment(node)}` -> `{node.left.id}`")


@operator("drop-guard", "drop the guard (`if cond:` -> `if True:`) around LDS accesses or syncs",
          "the guard that keeps waves or lanes apart on an LDS slot (reduction-slot reuse, lagging waves)")
def _drop_guard(src: KernelSource):
    for node in ast.walk(src.tree):
        if not (isinstance(node, ast.If) and src.in_device(node)) or isinstance(node.test, ast.Constant):
            continue
        if isinstance(node.test, ast.Call) and final_name(node.test.func) in COMPILE_TIME_GUARDS:
            continue  # a compile-time branch, not a guard between waves
        if node.test.lineno != node.lineno or not src.one_line(node.test):
            continue
        if src.touches_lds_or_sync(node.body):
            yield src.replace(node.test, "True", f"guard `if {src.segment(node.test)}:` dropped")


@operator("alias-lds-buffer", "make one LDS access use another LDS buffer of the kernel (two slots collapse)",
          "two LDS slots collapsed; aiter #6127 (work / has_work in one word), rowmap aliased into the arena")
def _alias_buffer(src: KernelSource):
    accesses = [(node, name) for node in ast.walk(src.tree) if src.in_device(node)
                for name in [src.lds_buffer_of(node)] if name is not None]
    buffers = {src.resolve(name) for _node, name in accesses}
    for _node, name in accesses:
        here = src.resolve(name)
        others = sorted({ident for scope, ident in buffers
                         if src.lds_slot[(scope, ident)] != src.lds_slot[here] and src.visible(name, scope, ident)})
        for other in others:
            yield src.replace(name, other, f"LDS buffer `{name.id}` -> `{other}`")


_PUBLISHERS = {Sync.BARRIER, Sync.WAIT, Sync.WAIT_BARRIER, Sync.SIGNAL, Sync.WAIT_SIGNAL}


@operator("store-below-barrier", "move the LDS access or copy issue before a barrier or wait below it",
          "a producer sunk past the barrier or wait that should publish or retire it: compiler motion "
          "across a raw barrier (rocm-libraries #10893), a refill issued before its slot is released")
def _store_below(src: KernelSource):
    for stmt, call, kind in src.sync_statements(_PUBLISHERS):
        prev = src.prev_sibling(stmt)
        if prev is None or not src.is_consumer(prev) or src.sync_kind(getattr(prev, "value", None)) is not None:
            continue
        if src.touches_lds_or_sync([prev]):
            yield src.swap_with_next(prev, stmt, f"`{src.segment(prev)}` moved below {kind.value} "
                                                 f"`{src.segment(call)}`")


# one step weaker: a narrower scope, or an ordering without its release/acquire half
_WEAKER = {"workgroup": "wavefront", "agent": "workgroup",
           "release": "monotonic", "acquire": "monotonic", "acq_rel": "release", "seq_cst": "acq_rel"}
# FlyDSL's enum member spellings (`SyncScope.Workgroup`, `AtomicOrdering.AcqRel`) of those values
_MEMBER = {"wavefront": "Wavefront", "workgroup": "Workgroup", "agent": "Agent", "monotonic": "Monotonic",
           "release": "Release", "acquire": "Acquire", "acq_rel": "AcqRel", "seq_cst": "SeqCst"}


@operator("weaken-fence", "narrow a fence's scope or drop half of its ordering",
          "a fence too weak to pair with the barrier (wavefront scope, release without acquire); "
          "the aiter #6344/#6348 fix spelled one step too weak")
def _weaken_fence(src: KernelSource):
    for _stmt, call, _kind in src.sync_statements({Sync.FENCE}):
        for node in [*call.args, *(kw.value for kw in call.keywords)]:
            value = _fence_word(node)
            if value in _WEAKER:
                weaker = _WEAKER[value]
                new = repr(weaker).replace("'", '"') if isinstance(node, ast.Constant) else \
                    src.segment(node)[: -len(node.attr)] + _MEMBER[weaker]
                yield src.replace(node, new, f"fence `{src.segment(call)}`: {value} -> {weaker}")


def _fence_word(node: ast.expr) -> str | None:
    """The scope or ordering a fence argument spells: a string, or an enum member."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute):
        return next((v for v, member in _MEMBER.items() if member == node.attr), None)
    return None


@operator("shift-lds-index", "index an LDS access one element further (a neighbour's slot)",
          "wrong buffer index: a slot of another wave or lane, or of the next stage")
def _shift_index(src: KernelSource):
    for node in ast.walk(src.tree):
        if not src.in_device(node) or src.lds_buffer_of(node) is None:
            continue
        index = _index_of(src, node)
        if index is not None and src.one_line(index):
            literal = isinstance(index, ast.Constant) and isinstance(index.value, int)
            new = str(index.value + 1) if literal else f"{_paren(src, index)} + 1"
            yield src.replace(index, new, f"LDS index `{src.segment(index)}` -> `{new}`")


def _index_of(src: KernelSource, node: ast.AST) -> ast.expr | None:
    """The index of an LDS access: a subscript's, or the argument after the buffer of a call."""
    if isinstance(node, ast.Subscript):
        return None if isinstance(node.slice, (ast.Tuple, ast.Slice)) else node.slice
    name = final_name(node.func) or ""
    if not ("load" in name or "store" in name):  # an access call, not a view or a helper object
        return None
    buf = src.lds_buffer_of(node)
    args = node.args
    for i, arg in enumerate(args[:-1]):
        if arg is buf:
            nxt = args[i + 1]
            return nxt if isinstance(nxt, (ast.Name, ast.BinOp, ast.Constant, ast.Subscript)) else None
    return None


# ----------------------------------------------------------------------------- mutants


@dataclass(frozen=True)
class Mutant:
    """One mutant: the edits of one site, with the original and new text of each line."""

    id: str
    operator: str
    line: int
    edits: tuple[Edit, ...]
    before: tuple[str, ...]
    after: tuple[str, ...]
    note: str

    def diff(self) -> str:
        """`-L: old` / `+L: new` lines."""
        out = []
        for e, old, new in zip(self.edits, self.before, self.after):
            out.append(f"-{e.line}: {old}")
            out.append(f"+{e.line}: {new}")
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {"id": self.id, "operator": self.operator, "line": self.line, "note": self.note,
                "edits": [{"line": e.line, "before": b, "after": a}
                          for e, b, a in zip(self.edits, self.before, self.after)]}


def find_mutants(text: str, path: str = "<kernel>", operators: Iterable[str] | None = None) -> list[Mutant]:
    """Every site of the chosen operators (default: all) in a kernel's source, in line order."""
    names = list(OPERATORS) if operators is None else list(operators)
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise ValueError(f"unknown mutation operator(s) {', '.join(unknown)}; "
                         f"registered: {', '.join(OPERATORS)}")
    src = KernelSource(text, path)
    found: list[tuple[int, int, str, Site]] = []
    seen: set[tuple[Edit, ...]] = set()
    for rank, name in enumerate(names):
        for site in OPERATORS[name].find(src):
            if site is None or site.edits in seen:
                continue
            seen.add(site.edits)
            found.append((min(e.line for e in site.edits), rank, name, site))
    found.sort(key=lambda t: (t[0], t[1]))
    mutants, counts = [], {}
    for line, _rank, name, site in found:
        key = f"{name}:{line}"
        counts[key] = counts.get(key, 0) + 1
        ident = key if counts[key] == 1 else f"{key}.{counts[key]}"
        before = tuple(src.lines[e.line - 1].strip() for e in site.edits)
        after = tuple(e.apply(src.lines[e.line - 1]).strip() for e in site.edits)
        mutants.append(Mutant(ident, name, line, site.edits, before, after, site.note))
    return mutants

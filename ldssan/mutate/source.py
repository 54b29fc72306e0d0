"""What the mutation operators know about a kernel file: its AST, which functions run on the
device, which calls synchronize, which names are LDS buffers, and how to rewrite one node
of one line.

Everything is found from the source, not from line numbers, so the operators work on a
kernel they have never seen. The classification is table-driven (`SYNC_CALLS`, keyed by
the called function's final name), never by substrings of names.

| What | How it is recognized |
|---|---|
| device function | decorated `@…kernel` / `@…jit` (with or without arguments; at any depth, e.g. inside a factory), a method whose own body has a sync call statement (a primitive class's methods are traced inside the calling kernel: the undecorated classmethods of `flydsl.extension.coop`), or a module-level function such a function references by name (transitively); nested functions inside them |
| sync call | `SYNC_CALLS[final name]`; plus local wrappers: a function of the file whose body is only sync calls takes the strongest kind of its body |
| LDS name | a binding (function scope, name; resolved lexically) assigned from an expression that calls `SharedAllocator`, whose attribute/call chain starts at an LDS name (`smem.partial.view(...)`), or that makes a view of one (`_VIEW_CALLS`: `fx.make_view(lds_ptr, ...)`) |
| LDS slot | the allocation's line plus the struct fields on the way: views of one buffer share a slot, two fields of one struct do not |
| LDS access | a call taking an LDS name (or an attribute of one) as an argument, or a subscript of one (`lds[i]`) |
| loop variable | the target name of a `for` statement |

`protocol_lines` is the public face of this analysis for tests and tools that need the line
of a kernel's synchronisation or LDS statement (the bundled kernels' tests, the demo): the
same finder the operators use, so a line a test names is a line a mutant can edit.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum
from types import ModuleType

from ldssan.variants import Edit, source_of


class Sync(Enum):
    BARRIER = "barrier"  # fenced barrier: release fence, signal, wait, acquire fence
    CLUSTER_BARRIER = "cluster-barrier"
    SIGNAL = "signal"  # raw s_barrier_signal: no memory semantics
    SPLIT_WAIT = "split-wait"  # raw s_barrier_wait
    WAIT = "wait"  # a counter wait (dscnt, tensorcnt, asynccnt, ...)
    WAIT_BARRIER = "wait+barrier"  # a counter wait followed by a barrier (pipeline_fence)
    WAIT_SIGNAL = "wait+signal"  # a counter wait followed by a raw signal (pipeline_fence_signal)
    FENCE = "fence"


# The called function's final name -> what it does (FlyDSL 0.5.0 spellings and the helper
# names of the public gfx1250 kernels; docs/memory-model.md "Barriers" and "Fences").
SYNC_CALLS: dict[str, Sync] = {
    "barrier": Sync.BARRIER,  # fx.gpu.barrier(), fx.barrier(), gpu.barrier()
    "workgroup_barrier": Sync.BARRIER,
    "s_barrier": Sync.BARRIER,
    "cluster_barrier": Sync.CLUSTER_BARRIER,
    "s_barrier_signal": Sync.SIGNAL,
    "s_barrier_wait": Sync.SPLIT_WAIT,
    "pipeline_fence_wait": Sync.SPLIT_WAIT,
    "s_wait_dscnt": Sync.WAIT,
    "s_wait_loadcnt": Sync.WAIT,
    "s_wait_storecnt": Sync.WAIT,
    "s_wait_tensorcnt": Sync.WAIT,
    "s_wait_asynccnt": Sync.WAIT,
    "s_wait_kmcnt": Sync.WAIT,
    "s_waitcnt": Sync.WAIT,
    "tensor_wait": Sync.WAIT,
    "tdm_wait": Sync.WAIT,
    "wait_asyncmark": Sync.WAIT,
    "waitcnt_stores": Sync.WAIT,
    "pipeline_fence": Sync.WAIT_BARRIER,
    "wait_lds_barrier": Sync.WAIT_BARRIER,
    "pipeline_fence_signal": Sync.WAIT_SIGNAL,
    "memory_fence": Sync.FENCE,
    "fence": Sync.FENCE,  # llvm.fence(...)
}

# Which argument of a wait is its count: the first positional one, else the first of these
# keywords that is present.
COUNT_KEYWORDS = ("count", "outstanding", "n", "vmcnt", "lgkmcnt", "cnt", "num")

# Ranking of kinds when a local wrapper contains several (the strongest names the wrapper).
_STRENGTH = [Sync.FENCE, Sync.WAIT, Sync.SPLIT_WAIT, Sync.SIGNAL, Sync.WAIT_SIGNAL, Sync.WAIT_BARRIER,
             Sync.BARRIER, Sync.CLUSTER_BARRIER]

# Calls that make a new view of a buffer: an assignment from one of these with an LDS
# argument is an LDS name too (`a_lds = fx.make_view(lds_ptr, layout)`).
_VIEW_CALLS = {"make_view", "recast", "recast_iter", "add_offset", "view", "peek", "allocate", "logical_divide",
               "slice", "get_iter", "make_ptr", "local_tile", "zipped_divide"}
_DEVICE_DECORATORS = {"kernel", "jit"}
COMPILE_TIME_GUARDS = {"const_expr"}  # `if const_expr(...)`: a trace-time branch, not a guard
RANGE_CALLS = {"range", "range_constexpr"}
STORAGE_PARAM = "storage"  # a device function's parameter holding LDS (coop's SharedStorage)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef, ast.Match)
_NO_CONSUMER = (ast.Return, ast.Pass, ast.Break, ast.Continue, ast.Raise, ast.Global, ast.Nonlocal,
                ast.Import, ast.ImportFrom)
if hasattr(ast, "TryStar"):
    _COMPOUND = _COMPOUND + (ast.TryStar,)


def final_name(func: ast.expr) -> str | None:
    """`fx.gpu.barrier` -> 'barrier'; `barrier` -> 'barrier'; anything else -> None."""
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def chain_root(node: ast.expr) -> ast.expr:
    """The object an attribute/call/subscript chain starts from (`smem.a.view(x)` -> `smem`)."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            return node


@dataclass(frozen=True)
class Site:
    """One application of an operator: the edits (one line; two for a move) and a note."""

    edits: tuple[Edit, ...]
    note: str


class KernelSource:
    """A parsed kernel file and the facts the operators query."""

    def __init__(self, text: str, path: str = "<kernel>") -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines()
        self.tree = ast.parse(text, filename=path)
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.wrappers: dict[str, Sync] = {}
        self._find_wrappers()
        self.device_nodes: set[ast.AST] = set()
        self._find_device_code()
        self.lds_slot: dict[tuple[ast.AST, str], tuple] = {}  # (scope, name) -> LDS slot
        self._find_lds_names()
        self.loop_vars: set[str] = {t.id for n in ast.walk(self.tree) if isinstance(n, (ast.For, ast.AsyncFor))
                                    for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        self.rocdl = self._rocdl_spelling()

    # ------------------------------------------------------------------ analysis

    def _find_wrappers(self) -> None:
        """Functions of the file whose body is nothing but sync calls act as sync calls."""
        for fn in ast.walk(self.tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            body = fn.body[1:] if (fn.body and isinstance(fn.body[0], ast.Expr)
                                   and isinstance(fn.body[0].value, ast.Constant)) else fn.body
            kinds = []
            for stmt in body:
                kind = self.sync_kind(stmt.value) if isinstance(stmt, ast.Expr) else None
                if kind is None:
                    break
                kinds.append(kind)
            else:
                if kinds:
                    self.wrappers[fn.name] = max(kinds, key=_STRENGTH.index)

    def _find_device_code(self) -> None:
        funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
        top = {fn.name: fn for fn in self.tree.body if isinstance(fn, funcs)}
        todo = [fn for fn in ast.walk(self.tree)
                if isinstance(fn, funcs) and (any(self._is_device_decorator(d) for d in fn.decorator_list)
                                              or self._synchronizes(fn))]
        seen: set[ast.AST] = set()
        while todo:
            fn = todo.pop()
            if fn in seen:
                continue
            seen.add(fn)
            for node in ast.walk(fn):
                self.device_nodes.add(node)
                if isinstance(node, ast.Name) and node.id in top and top[node.id] not in seen:
                    todo.append(top[node.id])

    def _synchronizes(self, fn: ast.AST) -> bool:
        """`fn` is a method of a class and itself (not a function nested in it) has a sync
        call statement. A module-level undecorated function stays host code."""
        return isinstance(self.parent.get(fn), ast.ClassDef) and any(
            isinstance(n, ast.Expr) and self.function_of(n) is fn and self.sync_kind(n.value) is not None
            for n in ast.walk(fn))

    @staticmethod
    def _is_device_decorator(dec: ast.expr) -> bool:
        if isinstance(dec, ast.Call):
            dec = dec.func
        return final_name(dec) in _DEVICE_DECORATORS

    # LDS names are resolved lexically: a name means the binding in the innermost enclosing
    # function that assigns it (`ptr` in one helper is not `ptr` in another).

    def function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) containing `node`."""
        node = self.parent.get(node)
        while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node = self.parent.get(node)
        return node if node is not None else self.tree

    def _scopes(self, node: ast.AST):
        scope = self.function_of(node)
        while True:
            yield scope
            if scope is self.tree:
                return
            scope = self.function_of(scope)

    def resolve(self, name: ast.Name) -> tuple[ast.AST, str]:
        """The (scope, identifier) binding a name use refers to."""
        for scope in self._scopes(name):
            if name.id in self._assigned.get(scope, ()):
                return scope, name.id
        return self.tree, name.id

    def _find_lds_names(self) -> None:
        self._assigned: dict[ast.AST, set[str]] = {}
        assigns = []
        for fn in ast.walk(self.tree):
            # A device function's `storage` parameter is the caller's SharedStorage (the coop
            # primitives' convention): one LDS slot, whichever function receives it.
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn in self.device_nodes:
                names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
                if STORAGE_PARAM in names:
                    self._assigned.setdefault(fn, set()).add(STORAGE_PARAM)
                    self.lds_slot[(fn, STORAGE_PARAM)] = ("param", STORAGE_PARAM)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                self._assigned.setdefault(self.function_of(node), set()).update(targets)
                if targets and node in self.device_nodes:
                    assigns.append((node, targets))
        changed = True
        while changed:
            changed = False
            for a, targets in assigns:
                scope = self.function_of(a)
                if all((scope, t) in self.lds_slot for t in targets):
                    continue
                slot = self._slot_of_value(a)
                if slot is not None:
                    for t in targets:
                        self.lds_slot[(scope, t)] = slot
                    changed = True

    def _slot_of_value(self, a: ast.Assign) -> tuple | None:
        """Which LDS allocation (and struct field) an assigned value denotes, or None.

        The slot is the allocation's line plus the field names on the way (`smem.partial`),
        so views of one buffer share a slot and two struct fields do not."""
        value = a.value
        if any(isinstance(c, ast.Call) and final_name(c.func) == "SharedAllocator" for c in ast.walk(value)):
            return ("alloc", a.lineno)
        root = chain_root(value)
        if isinstance(root, ast.Name) and self.resolve(root) in self.lds_slot:
            fields = []
            node = root
            while node is not value:
                up = self.parent[node]
                if isinstance(up, ast.Subscript) and up.value is node:
                    return None  # `storage.valid[i].to(...)`: a value loaded from LDS, not a view of it
                if isinstance(up, ast.Call) and up.func is node and final_name(node) not in _VIEW_CALLS:
                    return None  # a method's result (`.to(Int32)`), not a view
                if isinstance(up, ast.Attribute) and not (isinstance(self.parent.get(up), ast.Call)
                                                          and self.parent[up].func is up):
                    fields.append(up.attr)
                node = up
            return self.lds_slot[self.resolve(root)] + tuple(fields)
        if isinstance(value, ast.Call) and final_name(value.func) in _VIEW_CALLS:
            for x in value.args:
                if isinstance(x, ast.Name) and self.resolve(x) in self.lds_slot:
                    return self.lds_slot[self.resolve(x)]
        return None

    def visible(self, at: ast.AST, scope: ast.AST, ident: str) -> bool:
        """The binding (scope, ident) is what `ident` would mean at node `at`."""
        for s in self._scopes(at):
            if ident in self._assigned.get(s, ()):
                return s is scope
        return scope is self.tree

    def inside(self, node: ast.AST, kind: type) -> bool:
        """Some ancestor of `node` (within its statement) is a `kind`."""
        node = self.parent.get(node)
        while node is not None and not isinstance(node, ast.stmt):
            if isinstance(node, kind):
                return True
            node = self.parent.get(node)
        return False

    def is_lds(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and self.resolve(node) in self.lds_slot

    def _rocdl_spelling(self) -> str | None:
        """How this file can spell `flydsl.expr.rocdl` (for the raw split barrier), or None."""
        via_expr = None
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module == "flydsl.expr":
                for alias in node.names:
                    if alias.name == "rocdl":
                        return alias.asname or "rocdl"
            if isinstance(node, ast.ImportFrom) and node.module == "flydsl":
                for alias in node.names:
                    if alias.name == "expr":
                        via_expr = f"{alias.asname or 'expr'}.rocdl"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "flydsl.expr" and alias.asname:
                        via_expr = f"{alias.asname}.rocdl"
                    if alias.name == "flydsl.expr.rocdl" and alias.asname:
                        return alias.asname
        return via_expr

    # ------------------------------------------------------------------ queries

    def in_device(self, node: ast.AST) -> bool:
        return node in self.device_nodes

    def sync_kind(self, node: ast.AST) -> Sync | None:
        """The kind of a sync call expression, or None."""
        if not isinstance(node, ast.Call):
            return None
        name = final_name(node.func)
        if name is None:
            return None
        if isinstance(node.func, ast.Name) and name in self.wrappers:
            return self.wrappers[name]
        return SYNC_CALLS.get(name)

    def sync_statements(self, kinds: set[Sync] | None = None):
        """(statement, call, kind) of every one-line expression statement that is a sync call."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Expr) and node in self.device_nodes and self.one_line(node):
                kind = self.sync_kind(node.value)
                if kind is not None and (kinds is None or kind in kinds):
                    yield node, node.value, kind

    def lds_buffer_of(self, node: ast.AST) -> ast.Name | None:
        """The LDS name an access node touches: a call argument (or an attribute of one,
        `dst.llvm_ptr`) or a subscripted name; None if `node` is no LDS access."""
        if isinstance(node, ast.Call) and self.sync_kind(node) is None:
            for arg in list(node.args) + [k.value for k in node.keywords]:
                root = chain_root(arg) if isinstance(arg, ast.Attribute) else arg
                if self.is_lds(root):
                    return root
        if isinstance(node, ast.Subscript):
            root = chain_root(node.value)  # `buf[i]`, or a struct field `storage.counts[i]`
            if self.is_lds(root):
                return root
        return None

    def touches_lds_or_sync(self, nodes, _seen: set | None = None) -> bool:
        """Some statement accesses LDS or syncs, directly or through a call to a function
        of this file (followed transitively)."""
        seen = set() if _seen is None else _seen
        for stmt in nodes:
            for n in ast.walk(stmt):
                if self.lds_buffer_of(n) is not None or self.sync_kind(n) is not None:
                    return True
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                    fn = self._local_function(n.func)
                    if fn is not None and fn not in seen:
                        seen.add(fn)
                        if self.touches_lds_or_sync(fn.body, seen):
                            return True
        return False

    def _local_function(self, name: ast.Name):
        for scope in self._scopes(name):
            body = scope.body if hasattr(scope, "body") else []
            for stmt in body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name.id:
                    return stmt
        return None

    def uses_loop_var(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.loop_vars for n in ast.walk(node))

    def next_sibling(self, stmt: ast.stmt) -> ast.stmt | None:
        return self._sibling(stmt, +1)

    def prev_sibling(self, stmt: ast.stmt) -> ast.stmt | None:
        return self._sibling(stmt, -1)

    def _sibling(self, stmt: ast.stmt, step: int) -> ast.stmt | None:
        parent = self.parent.get(stmt)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and stmt in block:
                i = block.index(stmt) + step
                return block[i] if 0 <= i < len(block) else None
        return None

    @staticmethod
    def is_consumer(stmt: ast.stmt) -> bool:
        """A simple statement that can consume data: it calls something or indexes something."""
        if isinstance(stmt, _COMPOUND) or isinstance(stmt, _NO_CONSUMER):
            return False
        return any(isinstance(n, (ast.Call, ast.Subscript)) for n in ast.walk(stmt))

    def one_line(self, node: ast.AST) -> bool:
        return node.lineno == node.end_lineno

    def alone_on_line(self, stmt: ast.stmt) -> bool:
        """The statement is the whole line (apart from indentation and a trailing comment)."""
        if not self.one_line(stmt):
            return False
        line = self.lines[stmt.lineno - 1]
        head = line.encode()[: stmt.col_offset].decode()
        tail = line.encode()[stmt.end_col_offset:].decode().strip()
        return not head.strip() and (not tail or tail.startswith("#"))

    # ------------------------------------------------------------------ rewriting

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def replace(self, node: ast.AST, new: str, note: str) -> Site | None:
        """Replace one single-line node by `new` within its line (the rest of the line is kept)."""
        if not self.one_line(node):
            return None
        raw = self.lines[node.lineno - 1].encode()
        line = (raw[: node.col_offset] + new.encode() + raw[node.end_col_offset:]).decode()
        return Site((Edit(node.lineno, line),), note)

    def delete(self, stmt: ast.stmt, note: str) -> Site | None:
        if self.alone_on_line(stmt):
            return Site((Edit(stmt.lineno, None),), note)
        return self.replace(stmt, "pass", note)

    def swap_with_next(self, stmt: ast.stmt, nxt: ast.stmt, note: str) -> Site | None:
        """Move `stmt` one statement later: swap two adjacent one-line statements."""
        if not (self.alone_on_line(stmt) and self.alone_on_line(nxt)):
            return None
        a, b = self.lines[stmt.lineno - 1].strip(), self.lines[nxt.lineno - 1].strip()
        return Site((Edit(stmt.lineno, b), Edit(nxt.lineno, a)), note)


# ---------------------------------------------------------------------- protocol lines


@dataclass(frozen=True)
class Statement:
    """One single-line statement of a kernel's device code."""

    line: int
    text: str  # as written (no indentation)
    functions: tuple[str, ...]  # the enclosing defs, outermost first
    sync: Sync | None  # what it does if it is a sync call statement


class ProtocolLines:
    """The device statements of one kernel file, in line order, with lookups that fail loudly.

    `syncs(within)` lists the sync statements (barriers, waits, fences) of a function; `line`
    finds a statement by its exact text. Both raise `LookupError` naming the file and what
    was looked for, so a test built on them breaks when the kernel changes shape."""

    def __init__(self, path: str, statements: list[Statement]) -> None:
        self.path = path
        self.statements = statements

    def _within(self, within: str | None) -> list[Statement]:
        found = [s for s in self.statements if within is None or within in s.functions]
        if within is not None and not found:
            raise LookupError(f"{self.path}: no device function {within!r}")
        return found

    def syncs(self, within: str | None = None) -> list[Statement]:
        return [s for s in self._within(within) if s.sync is not None]

    def line(self, text: str, within: str | None = None, nth: int = 0) -> int:
        """Line of the `nth` device statement (in `within`) whose source is exactly `text`."""
        hits = [s.line for s in self._within(within) if s.text == text]
        if len(hits) <= nth:
            raise LookupError(f"{self.path}: statement {text!r} (occurrence {nth}) not found"
                              + (f" in {within}" if within else "") + f"; found at lines {hits}")
        return hits[nth]

    def named_syncs(self, within: str, names: tuple[str, ...]) -> dict[str, int]:
        """The sync lines of `within` in program (line) order, named by the caller; their count
        must match, so an added or removed sync is an error rather than a shifted name."""
        found = self.syncs(within)
        if len(found) != len(names):
            raise LookupError(f"{self.path}: {within} has {len(found)} sync statements "
                              f"{[(s.line, s.text) for s in found]}, expected {len(names)} {names}")
        return {name: s.line for name, s in zip(names, found)}


def protocol_lines(kernel: ModuleType | str) -> ProtocolLines:
    """The device statements of a kernel (a module, dotted name or file path), found from its AST."""
    path, text = source_of(kernel)
    src = KernelSource(text, path)
    out = []
    for node in ast.walk(src.tree):
        if isinstance(node, ast.stmt) and src.in_device(node) and src.one_line(node) \
                and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs, up = [], src.function_of(node)
            while up is not src.tree:
                defs.append(up.name)
                up = src.function_of(up)
            sync = src.sync_kind(node.value) if isinstance(node, ast.Expr) else None
            out.append(Statement(node.lineno, src.segment(node), tuple(reversed(defs)), sync))
    return ProtocolLines(path, sorted(out, key=lambda s: (s.line, s.text)))

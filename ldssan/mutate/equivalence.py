"""Honest equivalence: which surviving mutants cannot be a synchronization bug by
construction, and why every other survivor was not seen.

A mutant is *equivalent by construction* when

* its instrumented IR equals the clean kernel's (the worker finds this: status
  `equivalent`, `identical instrumented IR`), or
* it ran, nothing killed it, and its diff only **strengthens** synchronization. Decided from
  the edited lines alone (`strengthening`), each edit must be one of:

  | change | why it cannot remove an ordering |
  |---|---|
  | a wait's count made smaller (`s_wait_dscnt(1)` -> `(0)`, `n` -> `n - 1`) | it retires a superset of the ops |
  | a wait or a fenced barrier added to a line (the old statements kept, in order) | an extra wait only blocks longer; an extra barrier only adds happens-before edges |
  | a fence's scope made larger (`wavefront` < `workgroup` < `agent` < system; `-one-as` < all address spaces) or its ordering stronger (`release`/`acquire` < `acq_rel` < `seq_cst`) | a wider fence orders a superset |

  An extra barrier can still hang (divergent waves): such a mutant is run and classified
  `hang`, never equivalent, because only survivors are reclassified.

A survivor that is not equivalent gets `survivor_reason`: the evidence (no runtime rule, no
lint finding, K passing output checks) and, per operator, why no rule models the change.
"""

from __future__ import annotations

import ast

from .source import COUNT_KEYWORDS, SYNC_CALLS, Sync, final_name

_DELETED = "pass  # ldssan variant: deleted"
_ADDABLE = {Sync.WAIT, Sync.BARRIER, Sync.WAIT_BARRIER}
_SCOPES = {"singlethread": 0, "wavefront": 1, "workgroup": 2, "agent": 3, "": 4, "system": 4}
# LLVM's spellings and FlyDSL's `fx.AtomicOrdering` member names, lower-cased
_ORDERINGS = {"monotonic": 0, "release": 1, "acquire": 1, "acq_rel": 2, "acqrel": 2, "seq_cst": 3, "seqcst": 3}


def _statements(line: str) -> list[ast.stmt] | None:
    try:
        return ast.parse(line.strip()).body
    except SyntaxError:
        return None


def _sync_call(stmt: ast.stmt) -> tuple[ast.Call, Sync] | None:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        kind = SYNC_CALLS.get(final_name(stmt.value.func))
        if kind is not None:
            return stmt.value, kind
    return None


def _count(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((kw.value for kw in call.keywords if kw.arg in COUNT_KEYWORDS), None)


def _without_count(call: ast.Call) -> str:
    args = call.args[1:] if call.args else call.args
    kws = [kw for kw in call.keywords if call.args or kw.arg not in COUNT_KEYWORDS]
    return ast.dump(ast.Call(call.func, args, kws))


def _smaller_count(old: ast.expr, new: ast.expr) -> bool:
    if isinstance(old, ast.Constant) and isinstance(new, ast.Constant):
        return all(isinstance(v, int) and not isinstance(v, bool) for v in (old.value, new.value)) \
            and 0 <= new.value < old.value
    # `n` -> `n - k` (k > 0): what wait-minus-one writes for a count that is not a literal
    return (isinstance(new, ast.BinOp) and isinstance(new.op, ast.Sub) and isinstance(new.right, ast.Constant)
            and isinstance(new.right.value, int) and new.right.value > 0 and ast.dump(new.left) == ast.dump(old))


def _text_of(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower()
    if isinstance(node, (ast.Attribute, ast.Name)):
        return final_name(node).lower()
    return None


def _fence_parts(call: ast.Call) -> tuple[str | None, str | None, dict]:
    kws = {kw.arg: kw.value for kw in call.keywords}
    scope = _text_of(kws.pop("syncscope", kws.pop("scope", None)))
    ordering = _text_of(kws.pop("ordering", None))
    if call.args:  # llvm.fence(ordering, syncscope): positional forms
        ordering = ordering or _text_of(call.args[0])
        scope = scope if scope is not None or len(call.args) < 2 else _text_of(call.args[1])
    return scope, ordering, {k: ast.dump(v) for k, v in kws.items()}


def _scope_rank(scope: str | None) -> tuple[int, int] | None:
    scope = "" if scope is None else scope
    one_as = scope.endswith("-one-as")
    base = scope[: -len("-one-as")] if one_as else scope
    return (_SCOPES[base], 0 if one_as else 1) if base in _SCOPES else None


def _stronger_fence(old: ast.Call, new: ast.Call) -> str | None:
    (s0, o0, rest0), (s1, o1, rest1) = _fence_parts(old), _fence_parts(new)
    if rest0 != rest1 or ast.dump(old.func) != ast.dump(new.func) or len(old.args) != len(new.args):
        return None
    r0, r1 = _scope_rank(s0), _scope_rank(s1)
    if r0 is None or r1 is None or r1[0] < r0[0] or r1[1] < r0[1]:
        return None
    if o0 != o1:
        if o0 not in _ORDERINGS or o1 not in _ORDERINGS or _ORDERINGS[o1] <= _ORDERINGS[o0]:
            return None
    if (r0, o0) == (r1, o1):
        return None
    return f"fence scope {s0 or 'system'!r} -> {s1 or 'system'!r}" if r0 != r1 else f"fence ordering {o0} -> {o1}"


def _edit_strengthens(before: str, after: str) -> str | None:
    if after.strip().startswith(_DELETED):
        return None
    old, new = _statements(before), _statements(after)
    if not old or not new:
        return None
    if len(old) == len(new) == 1:
        a, b = _sync_call(old[0]), _sync_call(new[0])
        if a and b and a[1] == b[1] == Sync.WAIT and ast.dump(a[0].func) == ast.dump(b[0].func):
            ca, cb = _count(a[0]), _count(b[0])
            if ca is not None and cb is not None and _without_count(a[0]) == _without_count(b[0]) \
                    and _smaller_count(ca, cb):
                return f"smaller wait count `{ast.unparse(ca)}` -> `{ast.unparse(cb)}`"
        if a and b and a[1] == b[1] == Sync.FENCE:
            return _stronger_fence(a[0], b[0])
    # statements added: the old ones kept in order, every added one a wait or a fenced barrier
    kept = [ast.dump(s) for s in old]
    added, i = [], 0
    for stmt in new:
        if i < len(kept) and ast.dump(stmt) == kept[i]:
            i += 1
            continue
        sync = _sync_call(stmt)
        if sync is None or sync[1] not in _ADDABLE:
            return None
        added.append(f"{sync[1].value} `{ast.unparse(stmt)}`")
    if i == len(kept) and added:
        return "added " + ", ".join(added)
    return None


def strengthening(edits: list[dict]) -> str | None:
    """Why a mutant's edits only strengthen synchronization, or None if they may weaken it
    (or change anything else). `edits` are the record's `{line, before, after}`; a move
    (two edits that swap statements) is never a strengthening."""
    if len(edits) != 1:
        return None
    return _edit_strengthens(edits[0]["before"], edits[0]["after"])


# Per operator: why a surviving mutant of this kind escapes every rule (the evidence comes first).
_WHY = {
    "delete-sync": "the deleted statement ordered no pair of conflicting LDS accesses on this launch "
                   "(a redundant sync for this kernel and these inputs)",
    "wait-plus-one": "the op the weaker wait leaves in flight is neither read nor overwritten before a later "
                     "wait or barrier retires it",
    "wait-after-consumer": "the statement the wait now follows does not touch the bytes the waited ops write",
    "raw-split-barrier": "every LDS store the raw barrier publishes was already retired by an earlier wait, and "
                         "the lint saw no unfenced store/load around it",
    "ring-early": "the extra stage in flight overwrites no slot that is still being read in the happens-before "
                  "order (a deeper ring than needed)",
    "swap-ping-pong": "the other slot is written and published before it is read: a value change, not a race",
    "drop-guard": "the lanes or waves the guard kept out write the same bytes in the same order as before, or "
                  "nothing the others read",
    "alias-lds-buffer": "the collapsed buffers are never live at the same time, so no access pair races",
}


def survivor_reason(operator_name: str, output_launches: int) -> str:
    """The reason no rule saw a survivor: the evidence, then the operator's explanation."""
    why = _WHY.get(operator_name, f"no runtime or lint rule models the `{operator_name}` change")
    return (f"no runtime rule on the sanitized launch, no new lint finding, output correct on "
            f"{output_launches} launch(es): {why}")

"""Mutation operators on small kernels: which sites each finds (from the AST, not from line
numbers), that every mutant edits exactly one line (two adjacent ones for a move) and still
parses, and what is left alone (host code, compile-time branches, foreign scopes)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ldssan.mutate import OPERATORS, find_mutants, operator
from ldssan.mutate.source import KernelSource, Sync
from ldssan.variants import Edit

from .kernel_source import RING_KERNEL, line_of


def _sites(source: str, op: str | None = None) -> list[tuple[str, str, str]]:
    """(operator, original line, new line) of every mutant (first edit)."""
    return [(m.operator, m.before[0], m.after[0]) for m in find_mutants(source, "k.py", [op] if op else None)]


def _apply(source: str, edits) -> str:
    lines = source.splitlines()
    for e in edits:
        lines[e.line - 1] = e.apply(lines[e.line - 1])
    return "\n".join(lines) + "\n"


EXPECTED_RING = {
    ("delete-sync", "fx.gpu.barrier()"),
    ("delete-sync", "fx.rocdl.s_wait_dscnt(0)"),
    ("delete-sync", "fx.rocdl.s_barrier_signal(-1)"),
    ("delete-sync", "fx.rocdl.s_barrier_wait(-1)"),
    ("wait-plus-one", "fx.rocdl.s_wait_dscnt(0)"),
    ("raw-split-barrier", "fx.gpu.barrier()"),
    ("wait-after-consumer", "fx.rocdl.s_wait_dscnt(0)"),
    ("ring-early", "for s in range_constexpr(NB - 1):"),
    ("ring-early", "fx.memref_store(v + 1, ring, ((it + NB - 1) % NB) * N + tid)"),
    ("swap-ping-pong", "v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)"),
    ("drop-guard", "if tid % 32 == 0:"),
    ("store-below-barrier", "fx.memref_store(v + 1, ring, ((it + NB - 1) % NB) * N + tid)"),
    ("shift-lds-index", "fx.memref_store(wave + 100, flag, wave)"),
}


def test_ring_kernel_sites_per_operator():
    found = {(op, before) for op, before, _after in _sites(RING_KERNEL)}
    assert EXPECTED_RING <= found
    # alias-lds-buffer: every access to `ring` may use `flag` and the reverse
    alias = [(b, a) for op, b, a in _sites(RING_KERNEL, "alias-lds-buffer")]
    assert ("fx.memref_store(wave + 100, flag, wave)", "fx.memref_store(wave + 100, ring, wave)") in alias
    assert len(alias) == 6  # 4 accesses of `ring`, 2 of `flag`
    # nothing else: wait-minus-one has no count above 0, `(tid + 32) % N` and `1 - wave` use no loop variable
    assert {op for op, _ in found} == {op for op, _ in EXPECTED_RING} | {"alias-lds-buffer"}
    # shift-lds-index: each of the 6 accesses' index, once (a load's view call is no access)
    assert len(_sites(RING_KERNEL, "shift-lds-index")) == 6


@pytest.mark.parametrize("op, before, after", [
    ("wait-plus-one", "fx.rocdl.s_wait_dscnt(0)", "fx.rocdl.s_wait_dscnt(1)"),
    ("raw-split-barrier", "fx.gpu.barrier()", "fx.rocdl.s_barrier_signal(-1); fx.rocdl.s_barrier_wait(-1)"),
    ("ring-early", "for s in range_constexpr(NB - 1):", "for s in range_constexpr(NB):"),
    ("ring-early", "fx.memref_store(v + 1, ring, ((it + NB - 1) % NB) * N + tid)",
     "fx.memref_store(v + 1, ring, ((it + NB) % NB) * N + tid)"),
    ("swap-ping-pong", "v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)",
     "v = fx.memref_load(ring, ((it + 1) % NB) * N + (tid + 32) % N)"),
    ("drop-guard", "if tid % 32 == 0:", "if True:"),
])
def test_rewrites_keep_the_rest_of_the_line(op, before, after):
    assert (op, before, after) in _sites(RING_KERNEL, op)


def test_every_mutant_edits_one_line_and_parses():
    mutants = find_mutants(RING_KERNEL, "k.py")
    assert len({m.id for m in mutants}) == len(mutants)
    for m in mutants:
        if m.operator in ("wait-after-consumer", "store-below-barrier"):
            assert len(m.edits) == 2 and m.before == tuple(reversed(m.after)), m
        else:
            assert len(m.edits) == 1, m
        mutated = _apply(RING_KERNEL, m.edits)
        ast.parse(mutated)
        changed = [i for i, (a, b) in enumerate(zip(RING_KERNEL.splitlines(), mutated.splitlines())) if a != b]
        assert [i + 1 for i in changed] == sorted(e.line for e in m.edits), m


def test_move_swaps_the_wait_with_its_consumer():
    (m,) = find_mutants(RING_KERNEL, "k.py", ["wait-after-consumer"])
    wait, signal = line_of("fx.rocdl.s_wait_dscnt(0)"), line_of("fx.rocdl.s_barrier_signal(-1)")
    assert (m.line, [e.line for e in m.edits]) == (wait, [wait, signal])
    assert m.after == ("fx.rocdl.s_barrier_signal(-1)", "fx.rocdl.s_wait_dscnt(0)")
    assert m.diff().splitlines()[0] == f"-{wait}: fx.rocdl.s_wait_dscnt(0)"


def test_ids_are_operator_and_line():
    ids = [m.id for m in find_mutants(RING_KERNEL, "k.py")]
    assert f"delete-sync:{line_of('fx.gpu.barrier()')}" in ids
    out_line = line_of("Out[tid] = fx.memref_load(ring, last * N + tid) + fx.memref_load(flag, 1 - wave)")
    assert {f"alias-lds-buffer:{out_line}", f"alias-lds-buffer:{out_line}.2"} <= set(ids)


# A kernel the tool has never seen: other import spellings, a local sync wrapper, a wait with
# a count expression, a ping-pong toggle, host code and compile-time branches.
OTHER = textwrap.dedent('''\
    import flydsl.compiler as flyc
    from flydsl import expr as E
    from flydsl.expr import const_expr
    from flydsl.expr.rocdl import tdm_ops

    NB = 2

    def _sync():
        """A wrapper: a wait and a barrier."""
        tdm_ops.tensor_wait(0)
        E.gpu.barrier()

    def _helper(addr):
        ptr = E.inttoptr(None, addr)
        return E.ptr_load(ptr)

    @flyc.kernel(known_block_size=[64, 1, 1])
    def k(A: E.Tensor, n: E.Constexpr[int]):
        alloc = E.SharedAllocator(static=False)
        base = alloc.allocate(1024)
        buf = E.make_view(base, None)
        cur = 0
        for kt in range(4):
            tdm_ops.tensor_wait(NB - 1)
            _sync()
            E.ptr_store(E.ptr_load(buf), buf)
            nxt = 1 - cur
            if const_expr(n > 1):
                E.gpu.barrier()
            x = _helper(kt * 16)

    def host_reference(a):
        for i in range(4):
            a[i % 2] = a[(i + 2 - 1) % 2]
        return a
''')


def test_unseen_kernel_spellings():
    src = KernelSource(OTHER, "other.py")
    assert src.rocdl == "E.rocdl"  # `from flydsl import expr as E`
    assert src.wrappers == {"_sync": Sync.BARRIER}
    sites = _sites(OTHER)
    assert ("delete-sync", "_sync()", "pass  # ldssan variant: deleted `_sync()`") in sites
    assert ("raw-split-barrier", "_sync()", "E.rocdl.s_barrier_signal(-1); E.rocdl.s_barrier_wait(-1)") in sites
    assert ("wait-plus-one", "tdm_ops.tensor_wait(NB - 1)", "tdm_ops.tensor_wait(NB - 1 + 1)") in sites
    assert ("wait-minus-one", "tdm_ops.tensor_wait(NB - 1)", "tdm_ops.tensor_wait(NB - 1 - 1)") in sites
    assert ("swap-ping-pong", "nxt = 1 - cur", "nxt = cur") not in sites  # `cur` is no loop variable
    # host code and compile-time branches are left alone
    lines = {before for _op, before, _after in sites}
    assert not any("a[" in line for line in lines)
    assert "if const_expr(n > 1):" not in lines
    # `ptr` in _helper is an int address, not an LDS view: no alias into it
    assert not [s for s in sites if s[0] == "alias-lds-buffer"]


def test_raw_split_needs_a_rocdl_spelling():
    src = "import flydsl.compiler as flyc\nfrom flydsl.expr import gpu\n\n@flyc.kernel\ndef k():\n    gpu.barrier()\n"
    assert [op for op, *_ in _sites(src)] == ["delete-sync"]
    src2 = src.replace("from flydsl.expr import gpu", "from flydsl.expr import gpu, rocdl as R")
    assert ("raw-split-barrier", "gpu.barrier()", "R.s_barrier_signal(-1); R.s_barrier_wait(-1)") in _sites(src2)


def test_operator_selection_and_unknown_names():
    assert {m.operator for m in find_mutants(RING_KERNEL, "k.py", ["drop-guard"])} == {"drop-guard"}
    with pytest.raises(ValueError, match="unknown mutation operator.*registered: delete-sync"):
        find_mutants(RING_KERNEL, "k.py", ["no-such-op"])


def test_registry_refuses_duplicates_and_takes_new_operators():
    with pytest.raises(ValueError, match="registered twice"):
        operator("delete-sync", "again")(lambda src: [])
    try:
        @operator("test-touch-barrier", "append a comment to each barrier line")
        def _touch(src):
            for stmt, _call, _kind in src.sync_statements({Sync.BARRIER}):
                yield src.replace(stmt, src.segment(stmt) + "  # touched", "comment")

        (m,) = find_mutants(RING_KERNEL, "k.py", ["test-touch-barrier"])
        assert m.edits == (Edit(line_of("fx.gpu.barrier()"), "    fx.gpu.barrier()  # touched"),)
    finally:
        OPERATORS.pop("test-touch-barrier", None)


def test_every_operator_has_a_description():
    for op in OPERATORS.values():
        assert op.description and "\n" not in op.description


# -- the operators from the catalogue's list: one intended line change each --------------------

_FENCED = textwrap.dedent("""\
    import flydsl.compiler as flyc
    import flydsl.expr as fx

    @flyc.kernel
    def k(X: fx.Tensor):
        tid = fx.thread_idx.x
        buf = fx.SharedAllocator().allocate(64)
        fx.memref_store(X[tid], buf, tid)
        fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Release)
        fx.rocdl.s_barrier_signal(-1)
        fx.rocdl.s_barrier_wait(-1)
        fx.memory_fence(syncscope=fx.rocdl.SyncScope.Workgroup, ordering=fx.AtomicOrdering.Acquire)
        X[tid] = buf[tid ^ 32]
    """)


def test_weaken_fence_narrows_the_scope_or_drops_the_ordering():
    got = {(b, a) for _op, b, a in _sites(_FENCED, "weaken-fence")}
    assert got == {
        ('fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Release)',
         'fx.memory_fence(syncscope="wavefront", ordering=fx.AtomicOrdering.Release)'),
        ('fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Release)',
         'fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Monotonic)'),
        ("fx.memory_fence(syncscope=fx.rocdl.SyncScope.Workgroup, ordering=fx.AtomicOrdering.Acquire)",
         "fx.memory_fence(syncscope=fx.rocdl.SyncScope.Wavefront, ordering=fx.AtomicOrdering.Acquire)"),
        ("fx.memory_fence(syncscope=fx.rocdl.SyncScope.Workgroup, ordering=fx.AtomicOrdering.Acquire)",
         "fx.memory_fence(syncscope=fx.rocdl.SyncScope.Workgroup, ordering=fx.AtomicOrdering.Monotonic)"),
    }


def test_weakened_fences_are_never_called_strengthening():
    from ldssan.mutate.equivalence import strengthening

    for m in find_mutants(_FENCED, "k.py", ["weaken-fence"]):
        assert strengthening(m.to_dict()["edits"]) is None, m.diff()


def test_store_below_barrier_moves_the_producer_under_the_sync():
    unfenced = _FENCED.replace('    fx.memory_fence(syncscope="workgroup", ordering=fx.AtomicOrdering.Release)\n', "")
    assert unfenced != _FENCED
    (m,) = find_mutants(unfenced, "k.py", ["store-below-barrier"])
    assert m.before == ("fx.memref_store(X[tid], buf, tid)", "fx.rocdl.s_barrier_signal(-1)")
    assert m.after == ("fx.rocdl.s_barrier_signal(-1)", "fx.memref_store(X[tid], buf, tid)")
    assert m.edits[1].line == m.edits[0].line + 1
    # a statement with no LDS access or sync (here `tid = ...`) is never moved
    assert not find_mutants("import flydsl.expr as fx\n@fx.kernel\ndef k():\n    t = f()\n    fx.gpu.barrier()\n",
                            "k.py", ["store-below-barrier"])


def test_shift_lds_index_moves_one_element_and_keeps_the_rest():
    got = {(b, a) for _op, b, a in _sites(_FENCED, "shift-lds-index")}
    assert got == {("fx.memref_store(X[tid], buf, tid)", "fx.memref_store(X[tid], buf, tid + 1)"),
                   ("X[tid] = buf[tid ^ 32]", "X[tid] = buf[(tid ^ 32) + 1]")}


def test_storage_parameter_is_lds_for_the_operators():
    src = textwrap.dedent("""\
        from flydsl.expr import jit, barrier

        @jit
        def _publish(storage, tid, v):
            storage.counts[tid] = v
            barrier()
            return storage.counts[0]
        """)
    got = {(op, b, a) for op, b, a in _sites(src)}
    assert ("shift-lds-index", "storage.counts[tid] = v", "storage.counts[tid + 1] = v") in got
    assert ("shift-lds-index", "return storage.counts[0]", "return storage.counts[1]") in got
    assert ("store-below-barrier", "storage.counts[tid] = v", "barrier()") in got


def test_a_value_loaded_from_lds_is_no_buffer():
    src = KernelSource(textwrap.dedent("""\
        from flydsl.expr import jit, barrier

        @jit
        def _merge(storage, i):
            ring = storage.slots.view(4)
            valid = storage.valid[i].to(Int32)
            return ring, valid
        """), "k.py")
    names = {ident for _scope, ident in src.lds_slot}
    assert names == {"storage", "ring"}  # `ring` is a view of the storage; `valid` a value read from it

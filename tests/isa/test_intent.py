"""The analysis behind LDS051: what each hand-written IR wait retires on every IR path
(the intent table, keyed by the wait's source line, counter and count), and the ISA waits
that leave one of those ops outstanding on some compiled path. Real builds: two LDS loads
after a published store merged by the backend into one instruction (the wait retires
nothing) and the twin whose loads stay two; hand-written IR and ISA for loops and paths."""

from __future__ import annotations

import pytest

from ldssan.isa.asm import parse_kernel
from ldssan.isa.capture import capture_builds
from ldssan.isa.intent import IntentUnavailable, flatten, gaps, intent_table, kernel_intent, pick_stage
from ldssan.passes.ir.irview import Block, Frame, Loc, Op
from ldssan.passes.ir.types import parse_type
from tests.isa import intent_kernels
from tests.isa.test_counters import kernel

SRC = intent_kernels.__file__


def line_of(tag: str) -> int:
    with open(SRC) as fh:
        return next(n for n, s in enumerate(fh, 1) if s.rstrip().endswith(f"# {tag}"))


def _checked(fn):
    (build,) = capture_builds(fn)
    table = kernel_intent(build.ir, build.kernel)
    return table, gaps(parse_kernel(build.isa, build.kernel), table)


def test_merged_loads_leave_the_store_the_wait_retires_in_the_ir_outstanding():
    table, found = _checked(intent_kernels.launch_merged)
    wait, meant = line_of("WAIT"), line_of("MEANT")
    assert table == {(SRC, wait, "dscnt", 2): frozenset({(SRC, meant)})}
    (g,) = found
    assert (g.wait.line, g.op.line, g.counter, g.count) == (wait, meant, "dscnt", 2)
    assert g.wait.text == "s_wait_dscnt 0x2" and g.op.mnemonic == "ds_store_b32"


def test_the_twin_whose_loads_stay_two_instructions_has_no_gap():
    table, found = _checked(intent_kernels.launch_split)
    assert len(table) == 1  # the wait was matched and meant to retire the store
    assert found == []


# -- hand-written ISA: every path ------------------------------------------------------------

def _table(wait_line: int, count: int, *lines: int):
    return {("/src/k.py", wait_line, "dscnt", count): frozenset(("/src/k.py", n) for n in lines)}


def test_a_path_with_fewer_younger_ops_is_a_gap():
    # line 1: the meant store; one path has two loads after it, the other only one
    body = ("ds_store_b32 v0, v1", "ds_load_b32 v2, v3", "s_cbranch_scc1 .LBB0_2", "ds_load_b32 v4, v3",
            ".LBB0_2:", "s_wait_dscnt 0x2", "s_barrier_signal -1")
    k = parse_kernel(kernel(*body), "k")
    ((w, o),) = [(g.wait.line, g.op.line) for g in gaps(k, _table(6, 2, 1))]
    assert (w, o) == (6, 1)
    body = ("ds_store_b32 v0, v1", "ds_load_b32 v2, v3", "ds_load_b32 v4, v3", "s_cbranch_scc1 .LBB0_2",
            "s_nop 0", ".LBB0_2:", "s_wait_dscnt 0x2", "s_barrier_signal -1")
    assert gaps(parse_kernel(kernel(*body), "k"), _table(7, 2, 1)) == []


def test_a_loop_whose_compiled_body_has_fewer_ops_is_a_gap_on_the_back_edge():
    # the store at the loop bottom reaches the top wait over the back edge with one load after it
    body = (".LBB0_1:", "s_wait_dscnt 0x2", "ds_load_b32 v2, v3", "ds_store_b32 v0, v1", "ds_load_b32 v4, v3",
            "s_cbranch_scc1 .LBB0_1")
    found = gaps(parse_kernel(kernel(*body), "k"), _table(2, 2, 4))
    assert [(g.wait.line, g.op.line) for g in found] == [(2, 4)]


def test_a_wait_with_another_count_or_counter_is_not_matched():
    body = ("ds_store_b32 v0, v1", "s_wait_dscnt 0x1", "s_barrier_signal -1")
    k = parse_kernel(kernel(*body), "k")
    assert gaps(k, _table(2, 2, 1)) == []  # the backend's count differs: not the hand-written wait
    assert [g.op.line for g in gaps(k, _table(2, 1, 1))] == [1]


# -- the IR side: structured loops and ifs -------------------------------------------------

def _op(name: str, line: int, *, ptr: str | None = None, count: int | None = None, regions=()):
    types = (parse_type("i32"), parse_type(ptr)) if ptr else ()
    if name == "llvm.load" and ptr:
        types = (parse_type(ptr),)
    attrs = {} if count is None else {"count": count}
    return Op(name, (), (), (), attrs, [[Block((), (), list(r))] for r in regions],
              Loc((Frame("/k.py", line, 4),)), types)


STORE = lambda n: _op("llvm.store", n, ptr="!llvm.ptr<3>")  # noqa: E731
LOAD = lambda n: _op("llvm.load", n, ptr="!llvm.ptr<3>")  # noqa: E731
GLOBAL_LOAD = lambda n: _op("llvm.load", n, ptr="!llvm.ptr<1>")  # noqa: E731
WAIT = lambda n, c: _op("rocdl.s.wait.dscnt", n, count=c)  # noqa: E731


def _intent(*ops):
    return {k[1:]: sorted(line for _f, line in v) for k, v in intent_table(flatten("k", [Block((), (), list(ops))])).items()}


def test_ir_intent_straight_line():
    assert _intent(STORE(1), LOAD(2), LOAD(3), WAIT(4, 2)) == {(4, "dscnt", 2): [1]}
    assert _intent(STORE(1), GLOBAL_LOAD(2), WAIT(3, 1)) == {}  # a global load is not on dscnt


def test_ir_intent_loop_with_zero_trips_and_ifs():
    loop = _op("scf.for", 5, regions=[[LOAD(2), LOAD(3)]])
    # zero trips leave the store the newest op; the loop's first load always has one after it
    assert _intent(STORE(1), loop, WAIT(4, 1)) == {(4, "dscnt", 1): [2]}
    assert _intent(STORE(1), LOAD(6), loop, WAIT(4, 1)) == {(4, "dscnt", 1): [1, 2]}
    branch = _op("scf.if", 5, regions=[[LOAD(2)], []])
    assert _intent(STORE(1), branch, LOAD(3), WAIT(4, 2)) == {}  # the else path has one op
    assert _intent(STORE(1), branch, LOAD(3), WAIT(4, 1)) == {(4, "dscnt", 1): [1, 2]}


def test_ir_intent_refuses_what_it_cannot_model():
    with pytest.raises(IntentUnavailable, match="rocdl.wait.asyncmark.*/k.py:3:4"):
        _intent(STORE(1), _op("rocdl.wait.asyncmark", 3, count=0))
    with pytest.raises(IntentUnavailable, match="scf.execute_region.*regions"):
        _intent(_op("scf.execute_region", 2, regions=[[LOAD(1)]]))


def test_the_stage_after_convert_fly_to_rocdl_is_picked():
    names = ["10_canonicalize.mlir", "09_convert_fly_to_rocdl.mlir", "06_canonicalize.mlir", "22_llvm_ir.ll"]
    assert pick_stage(names) == "10_canonicalize.mlir"
    assert pick_stage(["06_canonicalize.mlir"]) is None

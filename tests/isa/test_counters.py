"""The ISA reader, CFG and per-counter analysis on hand-written gfx1250 assembly (no build):
in-order retirement (`s_wait_dscnt N` leaves the N most recent LDS ops), every path through
branches and loops, the packed combined waits, FLAT ops, and named refusals."""

from __future__ import annotations

import pytest

from ldssan.isa.asm import IsaParseError, parse_kernel
from ldssan.isa.cfg import IsaUnsupportedError, build_cfg
from ldssan.isa.check import check_kernel, store_unwaited_at_signal


def kernel(*body: str) -> str:
    """A kernel `k` whose body lines may end with `// TAG`; each gets `.loc` line = its index."""
    lines = ['\t.file\t1 "/src" "k.py"', "k:"]
    for n, text in enumerate(body, 1):
        text = text.split("//")[0].rstrip()
        if text.endswith(":"):
            lines.append(text)
        else:
            lines += [f"\t.loc\t1 {n} 4", f"\t{text}"]
    return "\n".join(lines + ["\ts_endpgm", ".Lfunc_end0:"]) + "\n"


def pairs(*body: str) -> set[tuple[int, int]]:
    """(store line, signal line) of every LDS050 finding."""
    k = parse_kernel(kernel(*body), "k")
    return {(f.other.line, f.this.line) for f in store_unwaited_at_signal(k)}


def test_store_then_signal_without_wait_is_found_with_both_lines():
    assert pairs("ds_store_b32 v0, v1", "s_barrier_signal -1") == {(1, 2)}


def test_wait_zero_retires_the_store():
    assert pairs("ds_store_b32 v0, v1", "s_wait_dscnt 0x0", "s_barrier_signal -1") == set()


def test_wait_n_leaves_the_n_most_recent_ops():
    body = ("ds_store_b32 v0, v1", "ds_load_b32 v2, v3", "s_wait_dscnt 0x1", "s_barrier_signal -1")
    assert pairs(*body) == set()  # one younger op: wait 1 retires the store
    body = ("ds_load_b32 v2, v3", "ds_store_b32 v0, v1", "s_wait_dscnt 0x1", "s_barrier_signal -1")
    assert pairs(*body) == {(2, 4)}  # the store is the most recent: wait 1 leaves it


def test_loads_alone_are_not_unpublished_stores():
    assert pairs("ds_load_b32 v2, v3", "s_barrier_signal -1") == set()


def test_atomics_write_lds():
    assert pairs("ds_add_u32 v0, v1", "s_barrier_signal -1") == {(1, 2)}


def test_a_path_that_skips_the_wait_is_found():
    body = ("ds_store_b32 v0, v1", "s_cbranch_scc1 .LBB0_2", "s_wait_dscnt 0x0", ".LBB0_2:",
            "s_barrier_signal -1")
    assert pairs(*body) == {(1, 5)}
    body = ("ds_store_b32 v0, v1", "s_wait_dscnt 0x0", "s_cbranch_scc1 .LBB0_2", "s_nop 0", ".LBB0_2:",
            "s_barrier_signal -1")
    assert pairs(*body) == set()


def test_loop_back_edge_carries_the_bottom_store_to_the_top_signal():
    body = (".LBB0_1:", "s_barrier_signal -1", "s_barrier_wait -1", "ds_store_b32 v0, v1",
            "s_cbranch_scc1 .LBB0_1")
    assert pairs(*body) == {(4, 2)}
    body = (".LBB0_1:", "s_barrier_signal -1", "s_barrier_wait -1", "ds_store_b32 v0, v1",
            "s_wait_dscnt 0x0", "s_cbranch_scc1 .LBB0_1")
    assert pairs(*body) == set()


def test_packed_combined_wait_reads_dscnt_from_the_low_bits():
    # s_wait_loadcnt_dscnt: loadcnt in bits [13:8], dscnt in [5:0]
    assert pairs("ds_store_b32 v0, v1", "s_wait_loadcnt_dscnt 0x0", "s_barrier_signal -1") == set()
    assert pairs("ds_store_b32 v0, v1", "s_wait_storecnt_dscnt 0x1", "s_barrier_signal -1") == {(1, 3)}
    assert pairs("ds_store_b32 v0, v1", "s_wait_loadcnt_dscnt 0x100", "s_barrier_signal -1") == set()


def test_wait_idle_retires_everything():
    assert pairs("ds_store_b32 v0, v1", "s_wait_idle", "s_barrier_signal -1") == set()


def test_other_counters_do_not_retire_lds_stores():
    body = ("ds_store_b32 v0, v1", "s_wait_loadcnt 0x0", "s_wait_kmcnt 0x0", "s_barrier_signal -1")
    assert pairs(*body) == {(1, 4)}


def test_flat_ops_retire_only_at_zero():
    body = ("flat_store_b32 v[0:1], v2", "ds_load_b32 v3, v4", "s_wait_dscnt 0x1", "s_barrier_signal -1")
    k = parse_kernel(kernel(*body), "k")
    from ldssan.isa.counters import walk
    state = dict((ins.line, st) for ins, st in walk(k))[4]
    assert 0 in state["dscnt"]  # the flat op, out of order with the LDS queue, is still pending


def test_cfg_blocks_and_successors():
    k = parse_kernel(kernel("s_cbranch_scc1 .LBB0_2", "s_nop 0", "s_branch .LBB0_3", ".LBB0_2:",
                            "s_nop 1", ".LBB0_3:", "s_nop 2"), "k")
    blocks = build_cfg(k)
    assert [(b.start, b.end, b.succs) for b in blocks] == [(0, 1, (1, 2)), (1, 3, (3,)), (3, 4, (3,)),
                                                           (4, 6, ())]


def test_indirect_control_flow_is_refused_with_its_source_line():
    k = parse_kernel(kernel("s_nop 0", "s_setpc_b64 s[0:1]"), "k")
    with pytest.raises(IsaUnsupportedError, match=r"s_setpc_b64 s\[0:1\].*/src/k.py:2:4.*indirect"):
        build_cfg(k)


def test_unknown_branch_target_and_missing_kernel_are_named_errors():
    with pytest.raises(IsaUnsupportedError, match="'.LBB9_9' is not a label"):
        build_cfg(parse_kernel(kernel("s_branch .LBB9_9"), "k"))
    with pytest.raises(IsaUnsupportedError, match="'.LBB0_9' is past the last instruction"):
        build_cfg(parse_kernel(kernel("s_branch .LBB0_9", "s_nop 0").replace(".Lfunc_end0:", ".LBB0_9:\n.Lfunc_end0:"), "k"))
    with pytest.raises(IsaParseError, match="no label `other:`"):
        parse_kernel(kernel("s_nop 0"), "other")
    with pytest.raises(IsaParseError, match="wait count is not an integer"):
        check_kernel(parse_kernel(kernel("s_wait_dscnt banana", "s_barrier_signal -1"), "k"))


def test_line_zero_is_no_source_line():
    text = kernel("ds_store_b32 v0, v1", "s_barrier_signal -1").replace("\t.loc\t1 1 4", "\t.loc\t1 0 4")
    (f,), notes = check_kernel(parse_kernel(text, "k"))
    assert notes == []
    assert f.other.file is None and f.other.where() == "<no source line>"
    assert f.this.where() == "/src/k.py:2:4"

"""Cluster launches on the virtual gfx1250: FlyDSL's `launch(cluster=...)` runs the
workgroups of a cluster resident at once; cluster ids, the cluster barrier (-3) and TDM
multicast into the LDS of the workgroups the mask names are modeled; masks naming a
workgroup outside the cluster or leaving out the issuer, cluster barriers outside a
cluster launch, trap / named barriers and bad cluster geometry are named errors with the
op and its line.

Expected values are computed from the launch geometry with torch / numpy, never copied
from a run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import rocdl as _rocdl
from flydsl.expr.rocdl import cluster, cluster_workgroup_id_x, cluster_workgroup_id_y
from ldssan import hook
from ldssan.runtime.emu import BarrierDivergenceError, DeadlockError, UnsupportedOp, emulate
from ldssan.runtime.emu.launch import EmuLaunchError, parse_module, run_kernel

from .test_copies_wmma import TDM_DESC, _tdm_body, _tdm_expect
from .sanitized import sanitize_mlir
from .test_ops import module

POLICIES = ["round-robin", "reverse", "random(1)", "random(2)+random"]
GRID = (4, 2, 1)


# -- cluster ids ---------------------------------------------------------------------------------
@flyc.kernel
def _ids(Out: fx.Tensor):
    i32 = ir.IntegerType.get_signless(32)
    wg = fx.block_idx.x + fx.block_idx.y * GRID[0]
    if fx.thread_idx.x == 0:
        Out[wg, 0] = fx.Int32(_rocdl.cluster_id_x(i32))
        Out[wg, 1] = fx.Int32(_rocdl.cluster_id_y(i32))
        Out[wg, 2] = fx.Int32(cluster_workgroup_id_x())
        Out[wg, 3] = fx.Int32(cluster_workgroup_id_y())


@flyc.jit
def ids(Out: fx.Tensor, cx: fx.Constexpr[int], cy: fx.Constexpr[int]):
    _ids(Out).launch(grid=GRID, block=(64, 1, 1), cluster=(cx, cy, 1))


def _expected_ids(cx: int, cy: int) -> torch.Tensor:
    by, bx = torch.meshgrid(torch.arange(GRID[1]), torch.arange(GRID[0]), indexing="ij")
    bx, by = bx.reshape(-1), by.reshape(-1)
    return torch.stack([bx // cx, by // cy, bx % cx, by % cy], dim=1).to(torch.int32)


@pytest.mark.parametrize("cx, cy", [(2, 2), (4, 1), (1, 2), (2, 1)])
@pytest.mark.parametrize("policy", POLICIES[:2])
def test_cluster_ids_follow_the_launch_geometry(cx, cy, policy):
    out = torch.full((GRID[0] * GRID[1], 4), -1, dtype=torch.int32)
    with emulate(policy):
        ids(out, cx, cy)
    torch.testing.assert_close(out, _expected_ids(cx, cy))


CLUSTER_IDS_MLIR = """
      %cx = rocdl.cluster.id.x : i32 loc("k.py":3:4)
      %wx = rocdl.cluster.workgroup.id.x : i32
      %bx = gpu.block_id x
      %b = arith.index_cast %bx : index to i32
      %c64 = arith.constant 64 : i32
      %c100 = arith.constant 100 : i32
      %base = arith.muli %b, %c64 : i32
      %i = arith.addi %base, %t : i32
      %hi = arith.muli %cx, %c100 : i32
      %r = arith.addi %hi, %wx : i32
      %p = llvm.getelementptr %out[%i] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r, %p : i32, !llvm.ptr<1>"""


@pytest.mark.parametrize("cluster", [None, (2, 1, 1), (4, 1, 1)])
def test_rocdl_cluster_ids_without_and_with_clusters(cluster):
    # without cluster dims a workgroup is its own cluster of one
    out = np.zeros(4 * 64, np.int32)
    run_kernel(parse_module(module(CLUSTER_IDS_MLIR)), "kern", grid=(4, 1, 1), block=(64, 1, 1), args=[out],
               cluster=cluster)
    c = (cluster or (1,))[0]
    b = np.repeat(np.arange(4), 64)
    np.testing.assert_array_equal(out, (b // c) * 100 + b % c)


def test_rocdl_cluster_id_under_batching_is_refused_with_a_hint():
    out = np.zeros(4 * 64, np.int32)
    with pytest.raises(UnsupportedOp, match=r"'rocdl.cluster.id.x' at k.py:3:4.*run this launch with batch=1"):
        run_kernel(parse_module(module(CLUSTER_IDS_MLIR)), "kern", grid=(4, 1, 1), block=(64, 1, 1),
                   args=[out], batch=2)


# -- the cluster barrier protects an exchange through global memory -------------------------------
@flyc.kernel
def _exchange(Buf: fx.Tensor, Out: fx.Tensor, synced: fx.Constexpr[bool]):
    # each workgroup publishes a value, then reads its cluster peer's (cluster of 2 along x)
    wg = fx.block_idx.x
    tid = fx.thread_idx.x
    if tid == 0:
        Buf[wg] = wg * 10 + 7
    if synced:
        cluster.cluster_barrier()
    Out[wg, tid] = Buf[wg ^ 1]


@flyc.jit
def exchange(Buf: fx.Tensor, Out: fx.Tensor, synced: fx.Constexpr[bool]):
    _exchange(Buf, Out, synced).launch(grid=(4, 1, 1), block=(64, 1, 1), cluster=(2, 1, 1))


def _exchange_run(synced: bool, run_ctx):
    buf = torch.full((4,), -1, dtype=torch.int32)
    out = torch.zeros((4, 64), dtype=torch.int32)
    with run_ctx as results:
        exchange(buf, out, synced)
    want = ((torch.arange(4) ^ 1) * 10 + 7).to(torch.int32)[:, None].expand(4, 64)
    return out, want, results


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("resident", [1, 4])
def test_cluster_barrier_orders_a_cross_workgroup_exchange(policy, resident):
    out, want, _ = _exchange_run(True, emulate(policy, resident=resident))
    torch.testing.assert_close(out, want)


def test_without_the_cluster_barrier_the_peer_value_is_not_there_yet():
    # the same kernel minus the barrier: workgroup 0 runs to its end before workgroup 1
    # publishes (round-robin switches waves only at scheduling points), so it reads -1
    out, want, _ = _exchange_run(False, emulate("round-robin"))
    assert (out[0] == -1).all() and not torch.equal(out, want)


@pytest.mark.parametrize("policy", POLICIES[:3])
def test_sanitized_cluster_exchange_is_exact_and_clean(policy):
    out, want, results = _exchange_run(True, hook.sanitize(policy))
    torch.testing.assert_close(out, want)
    assert not results.violations, results.violations


# -- refusals and misuse ------------------------------------------------------------------------------
@flyc.jit
def exchange_without_clusters(Buf: fx.Tensor, Out: fx.Tensor):
    _exchange(Buf, Out, True).launch(grid=(4, 1, 1), block=(64, 1, 1))


def test_cluster_barrier_outside_a_cluster_launch_names_the_op_and_line():
    buf, out = torch.zeros(4, dtype=torch.int32), torch.zeros((4, 64), dtype=torch.int32)
    with pytest.raises(UnsupportedOp) as info, emulate():
        exchange_without_clusters(buf, out)
    msg = str(info.value)
    assert "'rocdl.s.barrier.signal'" in msg and "outside a cluster launch" in msg, msg
    assert f"test_clusters.py:{_line_of('cluster.cluster_barrier()')}" in msg, msg


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line_of" not in line)


WAVE_ID = """
      %c32 = arith.constant 32 : i32
      %w = arith.divsi %t, %c32 : i32
      %c0 = arith.constant 0 : i32
      %is0 = arith.cmpi eq, %w, %c0 : i32"""


def _run(body: str, *, grid=(2, 1, 1), cluster=(2, 1, 1), policy="round-robin", out=None):
    view = parse_module(module(body))
    out = np.zeros(64, np.int32) if out is None else out
    run_kernel(view, "kern", grid=grid, block=(64, 1, 1), args=[out], cluster=cluster, policy=policy)
    return out


def test_two_waves_of_a_workgroup_arriving_is_an_error():
    body = """
      rocdl.s.barrier.signal id = -3 loc("k.py":5:4)
      rocdl.s.barrier.wait id = -3 loc("k.py":6:4)"""
    with pytest.raises(BarrierDivergenceError) as info:
        _run(body)
    msg = str(info.value)
    assert "only one wave per workgroup may arrive" in msg and "k.py:5:4" in msg, msg


def test_waiting_for_a_workgroup_that_never_arrives_is_a_deadlock():
    # workgroup 1 skips the barrier and ends: a workgroup that ends does not drop it
    body = WAVE_ID + """
      %bx = gpu.block_id x
      %b = arith.index_cast %bx : index to i32
      %c1 = arith.constant 1 : i32
      %first = arith.cmpi ne, %b, %c1 : i32
      scf.if %first {
        scf.if %is0 {
          rocdl.s.barrier.signal id = -3 loc("k.py":8:8)
        }
        rocdl.s.barrier.wait id = -3 loc("k.py":9:4)
      }"""
    with pytest.raises(DeadlockError) as info:
        _run(body)
    msg = str(info.value)
    assert "cluster barrier -3 of cluster 0" in msg and "workgroups arrived [0] of [0, 1]" in msg, msg


@pytest.mark.parametrize("policy", POLICIES)
def test_non_signalling_waves_wait_for_their_workgroups_arrival(policy):
    # wave 1 of each workgroup waits without signalling; its wait must not return before
    # both workgroups' wave 0 arrived: wave 0 stores a flag (out[64 * workgroup]) before
    # arriving, wave 1 copies the peer's flag after the wait (to out[64 * workgroup + 32 + lane]);
    # wave 0's waits are scheduling points, so a wait that returned early would read 0
    body = """
      %bx = gpu.block_id x
      %b = arith.index_cast %bx : index to i32
      %c1 = arith.constant 1 : i32
      %c32 = arith.constant 32 : i32
      %c64 = arith.constant 64 : i32
      %w = arith.divsi %t, %c32 : i32
      %c0 = arith.constant 0 : i32
      %is0 = arith.cmpi eq, %w, %c0 : i32
      %mine = arith.muli %b, %c64 : i32
      %peer_b = arith.xori %b, %c1 : i32
      %peer = arith.muli %peer_b, %c64 : i32
      scf.if %is0 {
        rocdl.s.wait.dscnt 0
        rocdl.s.wait.dscnt 0
        rocdl.s.wait.dscnt 0
        %p = llvm.getelementptr %out[%mine] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %c1, %p : i32, !llvm.ptr<1>
        rocdl.s.barrier.signal id = -3
      }
      rocdl.s.barrier.wait id = -3
      %not0 = arith.cmpi ne, %w, %c0 : i32
      scf.if %not0 {
        %q = llvm.getelementptr %out[%peer] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        %v = llvm.load %q : !llvm.ptr<1> -> i32
        %at = arith.addi %mine, %t : i32
        %r = llvm.getelementptr %out[%at] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %v, %r : i32, !llvm.ptr<1>
      }"""
    out = _run(body, policy=policy, out=np.zeros(128, np.int32)).reshape(2, 64)
    assert (out[:, 0] == 1).all() and (out[:, 32:] == 1).all(), out


@pytest.mark.parametrize("grid, cluster, what", [
    ((3, 1, 1), (2, 1, 1), "not a whole number of clusters"),
    ((32, 1, 1), (17, 1, 1), "holds 1 to 16 workgroups"),
    ((4, 4, 2), (4, 4, 2), "holds 1 to 16 workgroups"),
])
def test_bad_cluster_geometry_is_a_named_launch_error(grid, cluster, what):
    with pytest.raises(EmuLaunchError, match=what):
        _run("", grid=grid, cluster=cluster, out=np.zeros(64, np.int32))


@pytest.mark.parametrize("op, bid, kind", [
    ("rocdl.s.barrier.signal", -4, "cluster trap barrier"),
    ("rocdl.s.barrier.wait", 3, "named barrier"),
    ("rocdl.s.barrier.signal.isfirst", -3, "cluster barrier"),
])
def test_trap_named_and_isfirst_cluster_barriers_are_refused(op, bid, kind):
    res = "%f = " if "isfirst" in op else ""
    ty = " -> i1" if "isfirst" in op else ""
    body = f"""
      {res}{op} id = {bid}{ty} loc("k.py":7:4)"""
    with pytest.raises(UnsupportedOp) as info:
        _run(body)
    msg = str(info.value)
    assert f"'{op}' at k.py:7:4" in msg and f"barrier id {bid} ({kind})" in msg and "please report" in msg, msg


def test_gpu_dialect_cluster_ids():
    # gpu.cluster_id / cluster_block_id / cluster_dim_blocks / cluster_dim along x, per workgroup
    stores = "".join(f"""
        %i{k} = arith.addi %base, %c{k} : index
        %j{k} = arith.index_cast %i{k} : index to i32
        %p{k} = llvm.getelementptr %out[%j{k}] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i64
        %v{k} = arith.index_cast %{name} : index to i64
        llvm.store %v{k}, %p{k} : i64, !llvm.ptr<1>""" for k, name in enumerate(["ci", "bi", "nb", "nc"]))
    body = """
      %ci = gpu.cluster_id x
      %bi = gpu.cluster_block_id x
      %nb = gpu.cluster_dim_blocks x
      %nc = gpu.cluster_dim x
      %bx = gpu.block_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %base = arith.muli %bx, %c4 : index
      %z = arith.constant 0 : i32
      %is_t0 = arith.cmpi eq, %t, %z : i32
      scf.if %is_t0 {""" + stores + """
      }"""
    out = np.zeros(6 * 4, np.int64)
    view = parse_module(module(body))
    run_kernel(view, "kern", grid=(6, 1, 1), block=(64, 1, 1), args=[out], cluster=(3, 1, 1))
    b = np.arange(6)
    want = np.stack([b // 3, b % 3, np.full(6, 3), np.full(6, 6 // 3)], axis=1)
    np.testing.assert_array_equal(out.reshape(6, 4), want)


def _sanitize_cluster(body: str):
    """Instrument `body`, run it sanitized as two workgroups of one cluster, return the report."""
    return sanitize_mlir(module(body), [np.zeros(64, np.int32)], grid=(2, 1, 1), cluster=(2, 1, 1))


# wave 0 stores to LDS (waited and fenced), signals the cluster barrier; every wave waits on
# it, then wave 1 reads what wave 0 stored
LDS_HANDOFF = WAVE_ID + """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c7 = arith.constant 7 : i32
      scf.if %is0 {{
        llvm.store %c7, %base : i32, !llvm.ptr<3> loc("k.py":4:8)
        rocdl.s.wait.dscnt 0
        llvm.fence syncscope("workgroup") release
        rocdl.s.barrier.signal id = -3
      }}
      {workgroup_barrier}
      rocdl.s.barrier.wait id = -3
      llvm.fence syncscope("workgroup") acquire
      %not0 = arith.cmpi ne, %w, %c0 : i32
      scf.if %not0 {{
        %v = llvm.load %base : !llvm.ptr<3> -> i32 loc("k.py":9:8)
      }}"""


@pytest.mark.parametrize("workgroup_barrier, reported", [("", True), ("gpu.barrier", False)],
                         ids=["cluster-barrier-only", "with-workgroup-barrier"])
def test_the_sanitizer_takes_no_lds_order_from_the_cluster_barrier(workgroup_barrier, reported):
    # the engine is per workgroup and the cluster barrier adds no LDS happens-before edge to
    # it (conservative, as docs/virtual-gfx1250.md says); a workgroup barrier does
    report = _sanitize_cluster(LDS_HANDOFF.format(workgroup_barrier=workgroup_barrier))
    codes = {v.code for v in report.violations}
    assert ("LDS001" in codes) == reported, report.violations


# -- TDM workgroup mask ---------------------------------------------------------------------------
def _masked_tdm(mask: int | None) -> str:
    """The TDM test kernel with workgroup mask `mask` in D# group 1; None: each workgroup's
    own bit, 1 << (workgroup id x) (its flat id in a cluster along x)."""
    body = _tdm_body(True)
    cfg = 2 << 16 | 1 << 20 | 1 << 22  # _tdm_body's default config word
    old = f"%cfg = arith.constant {cfg} : i32"
    assert old in body
    if mask is not None:
        return body.replace(old, f"%cfg = arith.constant {cfg | mask} : i32")
    return body.replace(old, f"""%cfg0 = arith.constant {cfg} : i32
      %bxi = gpu.block_id x
      %bx32 = arith.index_cast %bxi : index to i32
      %one = arith.constant 1 : i32
      %own = arith.shli %one, %bx32 : i32
      %cfg = arith.ori %cfg0, %own : i32""")


@pytest.mark.parametrize("grid, cluster, mask", [
    ((1, 1, 1), None, 0), ((1, 1, 1), None, 0b1), ((2, 1, 1), (2, 1, 1), None), ((4, 1, 1), (4, 1, 1), None),
])
def test_tdm_load_with_only_its_own_workgroup_in_the_mask_loads_locally(grid, cluster, mask):
    # every workgroup loads the same tile into its LDS and writes it to `out`
    src = np.arange(100, 124, dtype=np.int32)
    view = parse_module(module(_masked_tdm(mask), "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", 512))
    out = np.zeros(64, np.int32)
    run_kernel(view, "kern", grid=grid, block=(64, 1, 1), args=[out, src], cluster=cluster)
    np.testing.assert_array_equal(out[:40], _tdm_expect(src)[:40])


@pytest.mark.parametrize("sanitized", [False, True], ids=["plain", "sanitized"])
def test_tdm_multicast_to_a_peer_is_refused_naming_the_op(sanitized):
    from ..sanitizer.test_copies_e2e import sanitize_text

    text = module(_masked_tdm(0b10), "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", 512)
    with pytest.raises(UnsupportedOp) as info:
        if sanitized:
            sanitize_text(text)
        else:
            run_kernel(parse_module(text), "kern", grid=(1, 1, 1), block=(64, 1, 1),
                       args=[np.zeros(64, np.int32), np.arange(24, dtype=np.int32)])
    msg = str(info.value)
    assert "'rocdl.tensor.load.to.lds'" in msg and "mask 0x0002" in msg and "workgroup(s) [1]" in msg, msg
    assert "not modeled" in msg and "please report" in msg, msg


@pytest.mark.parametrize("mask, words", [(0b10, ("leaves out the issuing workgroup", "bit 0")),
                                         (0b101, ("workgroup(s) [2]", "cluster holds 2"))])
def test_tdm_multicast_masks_public_text_does_not_define_are_refused_in_a_cluster(mask, words):
    # workgroup 0 of a 2-workgroup cluster: a mask without its own bit, or naming a bit past the cluster
    text = module(_masked_tdm(mask), "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", 512)
    with pytest.raises(UnsupportedOp) as info:
        run_kernel(parse_module(text), "kern", grid=(2, 1, 1), block=(64, 1, 1),
                   args=[np.zeros(64, np.int32), np.arange(24, dtype=np.int32)], cluster=(2, 1, 1))
    msg = str(info.value)
    assert "'rocdl.tensor.load.to.lds'" in msg and f"mask 0x{mask:04x}" in msg, msg
    assert all(w in msg for w in words) and "please report" in msg, msg


def test_tdm_multicast_writes_the_peer_s_lds_in_a_cluster():
    # both workgroups load the tile with mask 0b11 but only workgroup 0's copy is live
    # (pred 0 in workgroup 1): workgroup 1's LDS still receives it, from its peer
    body = _masked_tdm(0b11)
    old = "%g0 = vector.from_elements %c1, %c0, %lo, %hi : vector<4xi32>"
    assert old in body
    body = body.replace(old, """%bxp = gpu.block_id x
      %bxp32 = arith.index_cast %bxp : index to i32
      %pred = arith.subi %c1, %bxp32 : i32
      %g0 = vector.from_elements %pred, %c0, %lo, %hi : vector<4xi32>""")
    src = np.arange(100, 124, dtype=np.int32)
    out = np.zeros(2 * 64, np.int32)
    body = body.replace("llvm.getelementptr %out[%t]", "llvm.getelementptr %out[%ot]").replace(
        "%p = llvm.getelementptr", """%c64o = arith.constant 64 : i32
      %ob = arith.muli %bxp32, %c64o : i32
      %ot = arith.addi %ob, %t : i32
      %p = llvm.getelementptr""")
    view = parse_module(module(body, "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", 512))
    run_kernel(view, "kern", grid=(2, 1, 1), block=(64, 1, 1), args=[out, src], cluster=(2, 1, 1))
    np.testing.assert_array_equal(out[64:104], _tdm_expect(src)[:40])
    np.testing.assert_array_equal(out[:40], _tdm_expect(src)[:40])


assert "{cfg}" in TDM_DESC  # _masked_tdm rewrites the config word this kernel takes


# -- what is supported ------------------------------------------------------------------------------
def test_ldssan_env_lists_what_the_virtual_gfx1250_runs(capsys):
    from ldssan.cli import main
    from ldssan.runtime.emu.launch import REFUSED_OPS
    from ldssan.runtime.emu.ops import load_all

    assert main(["env"]) == 0
    out = capsys.readouterr().out
    emitters = load_all()
    assert set(REFUSED_OPS) <= set(emitters)  # the refused list names real emitters
    listed = out.split("ops (", 1)[1]
    for name in ("rocdl.cluster.id.x", "rocdl.cluster.workgroup.id.z", "gpu.cluster_dim_blocks", "gpu.shuffle"):
        assert name in listed, name
    assert "rocdl.permlane16.swap" not in listed.split("refused")[0]
    assert "cluster launches" in out and "please report" in out


def test_sanitized_multicast_mask_refusal_names_the_tdm_op():
    # under the sanitizer the cluster hooks see the mask first; the refusal still names the op
    text = module(_masked_tdm(0b10), "%out: !llvm.ptr<1>, %src: !llvm.ptr<1>", 512)
    with pytest.raises(UnsupportedOp) as info:
        sanitize_mlir(text, [np.zeros(64, np.int32), np.arange(24, dtype=np.int32)], grid=(2, 1, 1),
                      cluster=(2, 1, 1))
    msg = str(info.value)
    assert "'rocdl.tensor.load.to.lds'" in msg and "leaves out the issuing workgroup" in msg, msg

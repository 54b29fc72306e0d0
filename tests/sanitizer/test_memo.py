"""Launch memoization (runtime/emu/memo.py, docs/memo.md): a host call whose build,
arguments, run configuration, memory layout and the bytes of every region it reads equal an
earlier call's is replayed -- its post-state written back, its report replayed as this
launch's -- and any other call runs. Executions are counted by wrapping
`Launcher.launch_kernel`, the one place a kernel runs."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx
import ldssan
from ldssan import config
from ldssan.runtime.arguments import ConfigError
from ldssan.runtime.emu import emulate, launch, memo

from ..neighbour import IMPORTS, RACE_LINES, load_neighbour, neighbour_source

N = 64


@flyc.kernel
def _scale(In: fx.Tensor, Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = In[tid] * 3
    fx.gpu.barrier()
    Out[tid] = lds[(tid + 32) % N] + 1


@flyc.kernel
def _bump(Out: fx.Tensor):
    tid = fx.thread_idx.x
    Out[tid] = Out[tid] + 1  # reads its output's prior contents


@flyc.kernel
def _fill_ptr(Out: fx.Pointer):
    tid = fx.thread_idx.x
    Out[tid] = fx.Int32(tid) * 7


@flyc.kernel
def _peek(Addr: fx.Int64, Out: fx.Tensor):
    tid = fx.thread_idx.x
    g32 = fx.PointerType.get(elem_ty=fx.Int32.ir_type, address_space=fx.AddressSpace.Global, alignment=4)
    Out[tid] = fx.ptr_load(fx.inttoptr(g32, Addr + fx.Int64(tid) * 4))  # a tensor not among the arguments


@flyc.jit
def scale(In: fx.Tensor, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _scale(In, Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def bump(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _bump(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def fill_ptr(Out: fx.Pointer, stream: fx.Stream = fx.Stream(None)):
    _fill_ptr(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.jit
def peek(Addr: fx.Int64, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    _peek(Addr, Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)


def _want(x: torch.Tensor) -> torch.Tensor:
    return torch.roll(x * 3, -32) + 1


@pytest.fixture
def executed(monkeypatch):
    """The number of kernel launches the virtual gfx1250 actually ran."""
    count = [0]
    run = launch.Launcher.launch_kernel

    def launch_kernel(self, *args, **kwargs):
        count[0] += 1
        return run(self, *args, **kwargs)

    monkeypatch.setattr(launch.Launcher, "launch_kernel", launch_kernel)
    return count


@pytest.fixture(scope="module")
def racy(tmp_path_factory):
    """The racy neighbour kernel's launcher (tests/neighbour.py)."""
    return load_neighbour(tmp_path_factory.mktemp("racy"), name="memo_racy", sync=(), shift=32).launch


def _inputs():
    return torch.arange(N, dtype=torch.int32), torch.zeros(N, dtype=torch.int32)


def test_an_identical_second_launch_is_replayed_with_the_same_bytes(executed):
    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        scale(x, out)
        first = out.clone()
        out.zero_()  # the prior contents of the first call
        scale(x, out)
    assert executed[0] == 1
    assert [r.memo for r in col.results] == ["recorded", "replayed"]
    assert all(r.report.clean for r in col.results)
    torch.testing.assert_close(out, first)
    torch.testing.assert_close(out, _want(x))
    with ldssan.sanitize(memo=0) as plain:  # the same two calls, run both times
        out2 = torch.zeros(N, dtype=torch.int32)
        scale(x, out2)
        out2.zero_()
        scale(x, out2)
    assert executed[0] == 3 and [r.memo for r in plain.results] == ["", ""]
    assert out.numpy().tobytes() == out2.numpy().tobytes()


def test_a_changed_input_byte_runs_again(executed):
    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        scale(x, out)
        out.zero_()
        x[5] += 1
        scale(x, out)
    assert executed[0] == 2 and [r.memo for r in col.results] == ["recorded", "recorded"]
    torch.testing.assert_close(out, _want(x))


def test_a_write_only_output_is_not_in_the_key_so_a_benchmark_loop_runs_once(executed):
    # `scale` never reads Out: its prior contents (zeros, then the result) are not part of
    # what the launch sees, so the loop's second and third launches are replayed
    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        for _ in range(3):
            scale(x, out)
        out.fill_(-5)  # other prior contents: still replayed, and every byte is the result's
        scale(x, out)
    assert executed[0] == 1 and [r.memo for r in col.results] == ["recorded"] + ["replayed"] * 3
    torch.testing.assert_close(out, _want(x))


def test_a_replay_writes_only_the_bytes_the_call_stored(executed):
    # Out's storage is twice what `scale` writes: the bytes it never stored keep whatever
    # they hold before the replay (here: other values than at the recorded call)
    x = torch.arange(N, dtype=torch.int32)
    store = torch.full((2 * N,), 7, dtype=torch.int32)
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        scale(x, store[:N])
        store.fill_(-1)
        scale(x, store[:N])
    assert executed[0] == 1 and col.results[-1].memo == "replayed"
    torch.testing.assert_close(store[:N], _want(x))
    torch.testing.assert_close(store[N:], torch.full((N,), -1, dtype=torch.int32))


def test_a_kernel_reading_its_output_is_never_replayed_on_other_contents(executed):
    out = torch.zeros(N, dtype=torch.int32)
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        for _ in range(3):
            bump(out)
        assert executed[0] == 3
        out.zero_()  # the first call's prior contents again: its post-state is written back
        bump(out)
    assert executed[0] == 3 and col.results[-1].memo == "replayed"
    torch.testing.assert_close(out, torch.ones(N, dtype=torch.int32))


def test_a_replayed_racy_launch_reports_its_violations_as_its_own(executed, racy):
    out = torch.zeros(N, dtype=torch.int32)
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        racy(out)
        out.zero_()
        racy(out)
    assert executed[0] == 1
    first, second = col.results
    assert second.memo == "replayed" and second.launch != first.launch
    for r in (first, second):
        races = [v for v in r.report.violations if v.code == "LDS001"]
        assert races and {races[0].site.text.strip(), races[0].other_site.text.strip()} == RACE_LINES
        assert all(v.launches == frozenset({r.launch}) for v in r.report.violations)
    assert [(v.code, v.site.line, v.count) for v in first.report.violations] == \
           [(v.code, v.site.line, v.count) for v in second.report.violations]
    assert len(col.violations) == 2 * len(first.report.violations)


def test_a_seeded_random_policy_is_deterministic_and_replayed(executed, racy):
    # random(SEED) draws from random.Random(SEED) afresh for every scheduler run: a racy
    # kernel computes the same bytes each time, so a replay equals a re-run
    outs = []
    for budget in (0, 0, memo.DEFAULT_BUDGET):
        out = torch.zeros(N, dtype=torch.int32)
        with ldssan.sanitize("random(3)+random", memo=budget) as col:
            racy(out)
            outs.append(out.clone())
            out.zero_()
            racy(out)
        assert outs[-1].numpy().tobytes() == out.numpy().tobytes()
    assert executed[0] == 5 and col.results[-1].memo == "replayed"
    with ldssan.sanitize("random(4)+random", memo=memo.DEFAULT_BUDGET) as col:
        out = torch.zeros(N, dtype=torch.int32)
        racy(out)
    assert executed[0] == 6  # another seed, another block: run


def test_the_memory_tracks_every_kind_of_read_and_the_stored_bytes():
    # what the key rests on: loads, tile copies (TDM) and atomics' `locate` mark their
    # region read; a store marks only the bytes it stored, and reads nothing
    from ldssan.runtime.emu.memory import GlobalMemory

    arrays = [np.zeros(64, np.uint8) for _ in range(4)]
    gmem = GlobalMemory()
    for i, a in enumerate(arrays):
        gmem.add(a.ctypes.data, a.nbytes, f"a{i}")
    base = [a.ctypes.data for a in arrays]
    gmem.read(np.array([base[0]]), np.dtype(np.int32))  # untracked: nothing recorded
    assert gmem.read_bases == set() and gmem.written == {}
    gmem.track()
    gmem.read(np.array([base[0] + 8]), np.dtype(np.int32))
    assert gmem.read_rows(base[1], 2, 4, 16) is not None
    gmem.locate(np.array([base[2]]), 4)
    gmem.write(np.array([base[3] + 4, base[3] + 12]), np.ones((2, 1), np.int32))
    assert gmem.read_bases == {base[0], base[1], base[2]}
    assert list(gmem.written) == [base[3]]
    assert np.flatnonzero(gmem.written[base[3]]).tolist() == [4, 5, 6, 7, 12, 13, 14, 15]


def test_a_raw_pointer_into_an_argument_tensor_is_replayed(executed):
    # from_c_void_p into a live tensor: its storage is registered before the call, so it is
    # in the layout (and, were it read, in the key) like a tensor argument's
    out = torch.zeros(N, dtype=torch.int32)
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        for _ in range(2):
            out.zero_()
            fill_ptr(flyc.from_c_void_p(fx.Int32, out.data_ptr()))
    assert executed[0] == 1 and [r.memo for r in col.results] == ["recorded", "replayed"]
    torch.testing.assert_close(out, torch.arange(N, dtype=torch.int32) * 7)


def test_a_call_reaching_memory_outside_the_key_is_refused(executed):
    # `peek` loads a tensor through an integer address (llvm.inttoptr): that tensor joins
    # the call while it runs, its bytes were never in the key -- refused, run every time
    secret = torch.arange(N, dtype=torch.int32) * 5
    out = torch.zeros(N, dtype=torch.int32)
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        cfg = ldssan.runtime.emu.frontend.current()
        peek(secret.data_ptr(), out)
        secret += 1
        peek(secret.data_ptr(), out)
    assert executed[0] == 2
    assert [memo.refused(r.memo) for r in col.results] == [memo.NEW_REGIONS] * 2
    assert cfg.memo.stats()["not_memoizable"] == {memo.NEW_REGIONS: 2}
    torch.testing.assert_close(out, secret)


def test_a_change_no_tracked_store_made_is_refused(executed, monkeypatch):
    # fail closed: a writer the memory's tracking does not see (here: `write` patched to
    # store untracked) leaves a changed region neither read nor recorded as written
    from ldssan.runtime.emu import memory

    def untracked(self, addr, data):
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(len(addr), -1)
        r, off = self._locate(addr, raw.shape[1])
        r.view[off[:, None] + np.arange(raw.shape[1])] = raw

    monkeypatch.setattr(memory.GlobalMemory, "write", untracked)
    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        scale(x, out)
        out.zero_()
        scale(x, out)
    assert executed[0] == 2 and [memo.refused(r.memo) for r in col.results] == [memo.UNTRACKED_WRITE] * 2
    torch.testing.assert_close(out, _want(x))


def test_the_memo_evicts_the_least_recently_used_by_bytes(executed):
    x, out = _inputs()

    def call(value: int) -> None:
        x.fill_(value)
        out.zero_()
        scale(x, out)
        torch.testing.assert_close(out, _want(x))

    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET):
        call(1)
        size = ldssan.runtime.emu.frontend.current().memo.nbytes
    executed[0] = 0
    with ldssan.sanitize(memo=2 * size + size // 2) as col:  # room for two calls
        store = ldssan.runtime.emu.frontend.current().memo
        for value in (1, 2, 1, 3):  # 1 is used again before 3 comes: 2 goes
            call(value)
        assert executed[0] == 3 and store.evicted == 1 and store.nbytes <= store.budget
        call(1)
        assert executed[0] == 3
        call(2)
        assert executed[0] == 4
    assert [r.memo for r in col.results] == ["recorded", "recorded", "replayed", "recorded", "replayed",
                                             "recorded"]
    with ldssan.sanitize(memo=1) as col:  # one call's records alone are too large
        call(1)
        call(1)
    assert executed[0] == 6 and [memo.refused(r.memo) for r in col.results] == [memo.TOO_LARGE] * 2


def test_a_post_state_over_the_budget_is_kept_as_digests_and_replayed_where_memory_holds_it(executed):
    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET):
        scale(x, out)
        size = ldssan.runtime.emu.frontend.current().memo.nbytes
    executed[0] = 0
    out.zero_()
    with ldssan.sanitize(memo=size - 1) as col:  # the bytes do not fit, their digest does
        store = ldssan.runtime.emu.frontend.current().memo
        for _ in range(3):  # a benchmark loop: Out holds what the previous launch wrote
            scale(x, out)
        assert executed[0] == 1 and store.nbytes < size
        out.fill_(-5)  # not the recorded post-state, and no bytes to write back: run again
        scale(x, out)
    assert executed[0] == 2
    assert [r.memo for r in col.results] == ["recorded", "replayed", "replayed", "recorded"]
    torch.testing.assert_close(out, _want(x))


def test_a_large_post_state_is_kept_as_bytes_only_once_memory_did_not_hold_it(executed, monkeypatch):
    # over COPY_AFTER, the first recording keeps digests (a benchmark loop replays from them);
    # a call into memory not holding its post-state runs again and is then kept as bytes
    monkeypatch.setattr(memo, "COPY_AFTER", 1)
    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        store = ldssan.runtime.emu.frontend.current().memo
        scale(x, out)
        digests_only = store.nbytes
        scale(x, out)  # Out holds the post-state: replayed from the digests
        out.fill_(-5)
        scale(x, out)  # it does not: run again, and now its bytes are kept
        assert store.nbytes > digests_only
        out.fill_(-7)
        scale(x, out)  # replayed: the kept bytes written back
    assert executed[0] == 2
    assert [r.memo for r in col.results] == ["recorded", "replayed", "recorded", "replayed"]
    torch.testing.assert_close(out, _want(x))


def test_the_memo_option_turns_it_off_and_is_validated(executed, monkeypatch):
    x, out = _inputs()
    monkeypatch.delenv("FLYDSL_LDSSAN_MEMO", raising=False)
    assert config.get("memo") == memo.DEFAULT_BUDGET  # the option's default is the runtime's
    monkeypatch.setenv("FLYDSL_LDSSAN_MEMO", "0")
    with ldssan.sanitize() as col:
        scale(x, out)
        out.zero_()
        scale(x, out)
    assert executed[0] == 2 and [r.memo for r in col.results] == ["", ""]
    monkeypatch.setenv("FLYDSL_LDSSAN_MEMO", "1M")
    assert config.get("memo") == 1 << 20
    with ldssan.sanitize() as col:
        assert ldssan.runtime.emu.frontend.current().memo.budget == 1 << 20
    monkeypatch.setenv("FLYDSL_LDSSAN_MEMO", "lots")
    with pytest.raises(ConfigError, match="FLYDSL_LDSSAN_MEMO='lots': expected a byte count"):
        config.get("memo")
    with pytest.raises(ConfigError, match="memo"):
        ldssan.sanitize(memo=-1)


def test_plain_emulation_is_not_memoized_and_emulate_shares_the_sanitizers_memo(executed):
    x, out = _inputs()

    def call() -> None:
        out.zero_()
        scale(x, out)

    with emulate() as cfg:  # output checks and emulator benchmarks time real executions
        call()
        call()
    assert executed[0] == 2 and cfg.memo is None and "memo" not in cfg.launches[-1].stats
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        with emulate("reverse") as inner:
            call()
        call()  # lockstep: another policy, another key
        with emulate("reverse") as again:
            call()
    assert executed[0] == 4 and [r.memo for r in col.results] == ["recorded", "recorded", "replayed"]
    assert [r.stats["memo"] for r in inner.launches + again.launches] == ["recorded", "replayed"]
    assert [r.policy for r in again.launches] == ["reverse"]
    torch.testing.assert_close(out, _want(x))


pytest_plugins = ["pytester"]

LOOP = IMPORTS + neighbour_source(shift=32) + '''

@flyc.kernel
def peek_kernel(Addr: fx.Int64, Out: fx.Tensor):
    tid = fx.thread_idx.x
    g32 = fx.PointerType.get(elem_ty=fx.Int32.ir_type, address_space=fx.AddressSpace.Global, alignment=4)
    Out[tid] = fx.ptr_load(fx.inttoptr(g32, Addr + fx.Int64(tid) * 4))

@flyc.jit
def peek(Addr: fx.Int64, Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):
    peek_kernel(Addr, Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)

def test_benchmark_loop():
    out = torch.zeros(N, dtype=torch.int32)
    for _ in range(6):  # Out is only written: the first runs, the rest are replayed
        launch(out)
    assert int(out[0]) == 320

def test_raw_pointer():
    out = torch.zeros(N, dtype=torch.int32)
    launch(flyc.from_c_void_p(fx.Int32, out.data_ptr()))  # an argument tensor's address: recorded
    secret = torch.arange(N, dtype=torch.int32)
    peek(secret.data_ptr(), out)  # another tensor, reached through an integer: refused
'''


@pytest.mark.slow  # a pytest subprocess (~15 s); test_plugin.py's runs check the same lines at no extra cost
def test_the_summary_and_the_json_report_count_the_replayed_launches(pytester, monkeypatch):
    import json

    pytester.makepyfile(test_loop=LOOP)
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan-report=out.json")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines([f"ldssan: 5 launches replayed (identical to an earlier one), 2 recorded, "
                              f"1 not memoizable (1: {memo.NEW_REGIONS})"])
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["memo"] == {"replayed": 5, "recorded": 2, "not_memoizable": {memo.NEW_REGIONS: 1}}
    assert doc["tests"]["test_loop.py::test_benchmark_loop"]["replayed"] == 5


def test_the_memo_counts_and_their_summary_line(executed):
    from ldssan.session import add_memo_counts, memo_counts, memo_line

    x, out = _inputs()
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        for _ in range(4):
            scale(x, out)
        peek(x.data_ptr(), out)
    counts = memo_counts(col.results)
    assert counts == {"replayed": 3, "recorded": 1, "not_memoizable": {memo.NEW_REGIONS: 1}}
    assert memo_line(counts) == ("ldssan: 3 launches replayed (identical to an earlier one), 1 recorded, "
                                 f"1 not memoizable (1: {memo.NEW_REGIONS})")
    assert add_memo_counts(counts, counts)["not_memoizable"] == {memo.NEW_REGIONS: 2}
    assert memo_line(memo_counts(())) is None  # memo off: no line


def test_an_observed_launch_runs_and_says_who_observes_it(executed):
    # a torch profiler window (ldssan.vdevice) or the campaign's reliance probe records each
    # execution: while one says so, nothing is replayed
    x, out = _inputs()
    why = ["a test watches"]
    memo.add_observer(lambda: why[0])
    try:
        with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
            for _ in range(2):
                out.zero_()
                scale(x, out)
            why[0] = None
            out.zero_()
            scale(x, out)  # no longer observed, but the first two were never recorded
            out.zero_()
            scale(x, out)
    finally:
        memo._OBSERVERS.clear()
    assert executed[0] == 3
    assert [r.memo for r in col.results] == ["not memoizable: observed: a test watches"] * 2 + ["recorded", "replayed"]


def test_a_taint_run_and_the_device_runtime_are_not_memoizable(executed, monkeypatch):
    x, out = _inputs()
    with ldssan.sanitize(device="emulated", memo=memo.DEFAULT_BUDGET) as col:
        dev = ldssan.runtime.emu.frontend.current()
        for _ in range(2):
            out.zero_()
            scale(x, out)
    assert executed[0] == 2 and len(col.results) == 2 and all(r.report.clean for r in col.results)
    assert dev.memo.stats()["not_memoizable"] == {memo.NOT_REPLAYABLE: 2}
    # as under `ldssan rows`' tracking(), seen by the memo only (the run itself stays untainted)
    monkeypatch.setattr(memo, "_taint", types.SimpleNamespace(current=lambda: object()))
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col2:
        cfg = ldssan.runtime.emu.frontend.current()
        for _ in range(2):
            out.zero_()
            scale(x, out)
    assert executed[0] == 4
    assert [memo.refused(r.memo) for r in col2.results] == [memo.TAINT_RUN] * 2
    assert cfg.memo.stats()["not_memoizable"] == {memo.TAINT_RUN: 2}
    torch.testing.assert_close(out, _want(x))

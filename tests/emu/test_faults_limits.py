"""Fault table, limits of a launch: a grid of 2**31 - 1 workgroups (issue 29 #6), a negative
dynamic LDS size (issue 29 #8), and the CPU-time limit and step budget a user sets (issue
24 #5): FLYDSL_LDSSAN_TIME_LIMIT / _STEP_BUDGET, --ldssan-time-limit / --ldssan-step-budget,
`time_limit=` / `step_budget=` of emulate() and sanitize(); by default they scale with the
launch."""

from __future__ import annotations

import resource
import textwrap
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import flydsl.compiler as flyc
import flydsl.expr as fx

import ldssan
from ldssan.runtime.emu import EmulationTimeout, EmuLaunchError, StepBudgetExceeded, emulate
from ldssan.runtime.emu import grid
from ldssan.runtime.emu import runners
from ldssan.runtime.emu.limits import AUTO_TIME_MAX, BYTES_PER_BASE, Limits

pytest_plugins = ["pytester"]

N = 64
BIG_GRID = 2**31 - 1


@flyc.kernel
def counting(Out: fx.Tensor, n: fx.Int32):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(0)
    for _i in range(n):
        lds[tid] = lds[tid] + 1
    Out[tid] = lds[tid]


@flyc.jit
def launch_counting(Out: fx.Tensor, n: fx.Int32, G: fx.Int32, stream: fx.Stream = fx.Stream(None)):
    counting(Out, n).launch(grid=(G, 1, 1), block=(N, 1, 1), stream=stream)


@flyc.kernel
def neighbour(Out: fx.Tensor):
    tid = fx.thread_idx.x
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()
    lds[tid] = fx.Int32(tid) * 10
    fx.gpu.barrier()
    Out[tid] = lds[(tid + 1) % N]


@flyc.jit
def launch_smem(Out: fx.Tensor, S: fx.Int32, stream: fx.Stream = fx.Stream(None)):
    neighbour(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), smem=S, stream=stream)


CONTEXTS = {"emulate": emulate, "sanitize": ldssan.sanitize}


def _out():
    return torch.zeros(N, dtype=torch.int32)


@contextmanager
def _address_space_capped(extra: int):
    """At most `extra` more bytes of address space: the old list of every workgroup id
    fails here with a MemoryError instead of taking the machine's memory."""
    status = Path("/proc/self/status").read_text()
    used = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("VmSize:"))) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + extra if hard == resource.RLIM_INFINITY else min(hard, used + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# -- issue 29 #6: a grid of 2**31 - 1 workgroups ------------------------------------------------


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_a_grid_of_2_31_workgroups_stops_at_the_time_limit_in_bounded_memory(context):
    run = CONTEXTS[context]
    out = _out()
    with run():
        launch_counting(out, 0, 2)  # compiles outside the measurement
    with _address_space_capped(2 << 30):
        tracemalloc.start()
        t0 = time.process_time()
        try:
            with pytest.raises(EmulationTimeout) as info:
                with run(time_limit=1.0):
                    launch_counting(out, 0, BIG_GRID)
            seconds = time.process_time() - t0
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    msg = str(info.value)
    assert "time limit exceeded" in msg and "more than 1 s (CPU)" in msg, msg
    assert "the launch of @counting" in msg and f"grid=({BIG_GRID}, 1, 1) block=({N}, 1, 1)" in msg, msg
    assert seconds < 8, seconds
    assert peak < 256 << 20, peak  # the batch being run, not the grid


def test_workgroups_are_drawn_lazily_in_x_fastest_order():
    ids = grid.workgroups((BIG_GRID, 65535, 65535))
    assert [next(ids) for _ in range(3)] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert list(grid.workgroups((2, 2, 1))) == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    first = next(grid.cluster_groups((BIG_GRID - 1, 2, 1), (2, 2, 1)))
    assert first == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]


def test_a_sanitized_workgroup_id_past_32_bits_is_refused_by_name():
    # a violation record holds the linear workgroup id in 32 bits: refused, never wrapped
    runners._record_ids_fit((BIG_GRID, 3, 1), [(1, 2, 0)])  # 4,294,967,295: the last that fits
    with pytest.raises(EmuLaunchError, match=r"workgroup \(2, 2, 0\) has the linear id 4,294,967,296"):
        runners._record_ids_fit((BIG_GRID, 3, 1), [(1, 2, 0), (2, 2, 0)])


# -- issue 29 #8: a negative dynamic LDS size ---------------------------------------------------


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_a_negative_dynamic_lds_size_is_refused_naming_the_value(context):
    run = CONTEXTS[context]
    with pytest.raises(EmuLaunchError, match=r"@neighbour\w*: dynamic LDS size smem=-16 bytes is negative"):
        with run():
            launch_smem(_out(), -16)
    out = _out()
    with run() as col:  # a valid size still runs, and the kernel is correct
        launch_smem(out, 256)
    assert out.tolist() == [((t + 1) % N) * 10 for t in range(N)]
    if context == "sanitize":
        assert col.violations == []


# -- issue 24 #5: limits a user sets, and the scaled default ------------------------------------


def test_the_auto_limits_scale_with_the_threads_or_the_memory_of_the_launch():
    auto = Limits()
    assert auto.seconds(10.0, 64) == 10.0  # one small workgroup: the base, as before
    assert auto.seconds(10.0, 1024) == 10.0
    assert auto.seconds(10.0, 1025) == 20.0
    assert auto.seconds(10.0, 256 * 1024) == 2560.0  # 256 workgroups of 1024 threads
    assert auto.seconds(10.0, BIG_GRID * 64) == AUTO_TIME_MAX  # bounded: a huge grid still ends
    # or with the memory it can reach, whichever is more: a grid-stride kernel of few threads
    assert auto.seconds(10.0, 6 * 512, BYTES_PER_BASE) == 30.0
    assert auto.seconds(10.0, 6 * 512, 8 * BYTES_PER_BASE + 1) == 90.0
    assert auto.seconds(10.0, 64, 1 << 50) == AUTO_TIME_MAX
    assert auto.steps(50_000_000, 64) == 50_000_000
    assert auto.steps(50_000_000, 16 * 1024) == 16 * 50_000_000  # a batch of 16 workgroups
    set_ = Limits(time_limit=2.5, step_budget=1000)
    assert set_.seconds(10.0, BIG_GRID * 64) == 2.5 and set_.steps(50_000_000, 16 * 1024) == 1000
    assert Limits("auto", "auto") == auto and Limits("7", "1_000") == Limits(7.0, 1000)


def test_a_launch_gets_the_time_of_the_memory_it_can_reach(monkeypatch):
    # the launch's limit counts the bytes of its tensors (here 2 x BYTES_PER_BASE of storage
    # behind a 64-element view), not only its 64 threads
    got = []
    seconds = Limits.seconds

    def spy(self, base, threads, data_bytes=0):
        got.append(seconds(self, base, threads, data_bytes))
        return got[-1]

    monkeypatch.setattr(Limits, "seconds", spy)
    big = torch.zeros(2 * BYTES_PER_BASE // 4, dtype=torch.int32)
    with emulate():
        launch_counting(big[:N], 1, 1)
    assert got == [2 * runners.TIME_LIMIT] and big[:N].tolist() == [1] * N


@pytest.mark.parametrize("kwargs, message", [
    ({"time_limit": 0}, "time limit must be 'auto' or a number of seconds > 0, got 0"),
    ({"time_limit": -1.0}, "got -1.0"),
    ({"time_limit": float("nan")}, "got nan"),
    ({"time_limit": "soon"}, "got 'soon'"),
    ({"step_budget": 0}, "step budget must be 'auto' or an integer >= 1, got 0"),
    ({"step_budget": 1.5}, "got 1.5"),
    ({"step_budget": True}, "got True"),
])
@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_a_bad_limit_is_refused_before_any_launch(context, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        with CONTEXTS[context](**kwargs):
            pytest.fail("the block ran")


def test_a_set_time_limit_stops_a_runaway_loop_at_it():
    t0 = time.process_time()
    with pytest.raises(EmulationTimeout, match=r"more than 0\.3 s \(CPU\)") as info:
        with ldssan.sanitize(time_limit=0.3, step_budget=10**9):
            launch_counting(_out(), 40_000_000, 1)
    assert time.process_time() - t0 < 5
    assert "running the loop 'scf.for' at" in str(info.value)


def test_the_options_set_the_limits(monkeypatch):
    monkeypatch.setenv("FLYDSL_LDSSAN_STEP_BUDGET", "1000")
    with pytest.raises(StepBudgetExceeded, match=r"exceeds the 1,000 steps left of 1,000"):
        with ldssan.sanitize():
            launch_counting(_out(), 5000, 1)
    monkeypatch.setenv("FLYDSL_LDSSAN_STEP_BUDGET", "1000000000")
    monkeypatch.setenv("FLYDSL_LDSSAN_TIME_LIMIT", "0.3")
    with pytest.raises(EmulationTimeout, match=r"more than 0\.3 s \(CPU\)"):
        with ldssan.sanitize():
            launch_counting(_out(), 40_000_000, 1)
    out = _out()
    with ldssan.sanitize(time_limit="auto") as col:  # an argument wins over the environment
        launch_counting(out, 5000, 1)
    assert out.tolist() == [5000] * N and col.violations == []


def test_a_correct_launch_larger_than_the_base_is_not_cut_off_by_the_default(monkeypatch):
    groups = 128  # 8 units of 1024 threads: the auto limit is 8 bases

    def cpu_seconds(**kw):
        out = _out()
        t0 = time.process_time()
        with emulate(**kw):  # round-robin: one scheduler run per workgroup
            launch_counting(out, 50, groups)
        assert out.tolist() == [50] * N
        return time.process_time() - t0

    cpu_seconds()  # translation caches warm
    cost = cpu_seconds()
    base = cost / 3  # the fixed limit, this small, would stop the launch a third of the way
    monkeypatch.setattr(runners, "TIME_LIMIT", base)
    cpu_seconds()  # auto: 8 * base = 2.7x what it costs
    with pytest.raises(EmulationTimeout, match=f"grid=\\({groups}, 1, 1\\)"):
        cpu_seconds(time_limit=base)


# -- the pytest options -------------------------------------------------------------------------

RUNAWAY_TEST = textwrap.dedent('''
    import torch, flydsl.compiler as flyc, flydsl.expr as fx

    @flyc.kernel
    def counting(Out: fx.Tensor, n: fx.Int32):
        tid = fx.thread_idx.x
        lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, 64]).peek()
        lds[tid] = fx.Int32(0)
        for _i in range(n):
            lds[tid] = lds[tid] + 1
        Out[tid] = lds[tid]

    @flyc.jit
    def launch(Out: fx.Tensor, n: fx.Int32, stream: fx.Stream = fx.Stream(None)):
        counting(Out, n).launch(grid=(1, 1, 1), block=(64, 1, 1), stream=stream)

    def test_runaway():
        launch(torch.zeros(64, dtype=torch.int32), 40_000_000)
''')


def test_pytest_options_set_the_limits_over_the_environment(pytester, monkeypatch):
    pytester.makepyfile(test_runaway=RUNAWAY_TEST)
    monkeypatch.setenv("FLYDSL_LDSSAN_TIME_LIMIT", "1000")  # the command line wins
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan", "--ldssan-time-limit=0.5",
                                        "--ldssan-step-budget=1000000000")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*EmulationTimeout*more than 0.5 s (CPU)*"])


@pytest.mark.parametrize("args, env, message", [
    (["--ldssan-time-limit=-1"], {}, "ERROR: ldssan: --ldssan-time-limit='-1': time limit must be*"),
    ([], {"FLYDSL_LDSSAN_STEP_BUDGET": "0"}, "ERROR: ldssan: FLYDSL_LDSSAN_STEP_BUDGET='0': step budget must be*"),
], ids=["time-limit-flag", "step-budget-env"])
def test_a_bad_limit_option_is_a_usage_error(pytester, monkeypatch, args, env, message):
    pytester.makepyfile(test_plain="def test_one():\n    pass\n")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = pytester.runpytest_subprocess("-p", "ldssan", "--ldssan", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([message])

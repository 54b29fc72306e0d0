"""GPU suites' timing helpers work unchanged on the virtual gfx1250: torch.profiler with CUDA
activity reports each emulated kernel as a CUDA event (its name, one per launch, the emulator's
wall time as duration), and CUDA events time what ran between them. `perf_us` below is ours,
written in the style of such helpers (FlyDSL's tests/test_common.py run_perftest): it reads
only what they read, and fails the way they do when the profiler holds no device events."""

from __future__ import annotations

import math

import pytest
import torch
import torch.profiler as tpf

import ldssan
from ldssan import hook, vdevice

from ..neighbour import RACE_LINES, load_neighbour
from .installed import gpu  # noqa: F401  (the fixture)

N = 64


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    clean = load_neighbour(tmp_path_factory.mktemp("clean"), name="timed_synced")
    racy = load_neighbour(tmp_path_factory.mktemp("racy"), name="timed_racy", sync=(), shift=32)
    return clean, racy


def perf_us(fn, *args, iters: int = 3, warmup: int = 1, events: bool = False) -> tuple[float, dict]:
    """(device microseconds per iteration, {kernel name: launches}) of `fn(*args)`."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    if events:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters * 1000, {}
    with tpf.profile(activities=[tpf.ProfilerActivity.CPU, tpf.ProfilerActivity.CUDA], with_modules=True) as prof:
        for _ in range(iters):
            fn(*args)
        torch.cuda.synchronize()
    device = [e for e in prof.events() if "CUDA" in str(e.device_type)]
    if not device:
        raise LookupError("the profiler recorded no device events")  # where such helpers break
    counts: dict[str, int] = {}
    for e in device:
        counts[e.name] = counts.get(e.name, 0) + 1
    return sum(e.self_device_time_total for e in device) / iters, counts


def test_the_profiler_reports_each_emulated_kernel_as_a_cuda_event(gpu, kernels):
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    with ldssan.sanitize() as col:
        us, counts = perf_us(kernels[0].launch, out, iters=3)
    assert math.isfinite(us) and us > 0
    assert counts == {"timed_synced_0": 3}  # the kernel's name, once per timed launch
    assert not col.violations and out.cpu().tolist() == [(i + 1) % N * 10 for i in range(N)]


def test_a_replayed_launch_is_a_device_event_of_the_window(gpu, kernels):
    # run_perftest's timed loop sits in a profiler window: its launches are replayed by the
    # memo (docs/memo.md) and still counted, one device event each, lasting what the replay took
    from ldssan.runtime.emu import memo

    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    with ldssan.sanitize(memo=memo.DEFAULT_BUDGET) as col:
        us, counts = perf_us(kernels[0].launch, out, iters=4)
    assert counts == {"timed_synced_0": 4} and math.isfinite(us) and us > 0
    assert [r.memo for r in col.results] == ["recorded"] + ["replayed"] * 4
    assert out.cpu().tolist() == [(i + 1) % N * 10 for i in range(N)]


def test_key_averages_give_the_kernels_device_time(gpu, kernels):
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    with ldssan.sanitize():
        with tpf.profile(activities=[tpf.ProfilerActivity.CUDA]) as prof:
            kernels[0].launch(out)
            kernels[0].launch(out)
    (row,) = [a for a in prof.key_averages() if a.key == "timed_synced_0"]
    assert row.count == 2 and row.device_time_total > 0 and row.self_device_time_total == row.device_time_total
    assert all(str(e.device_type) == "DeviceType.CUDA" for e in prof.events())  # CUDA only, as asked


def test_cuda_events_time_what_ran_between_them(gpu, kernels):
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    with ldssan.sanitize() as col:
        us, _ = perf_us(kernels[0].launch, out, events=True)
    assert math.isfinite(us) and us > 0 and len(col.results) == 4  # warm-up + 3 timed


def test_a_racy_kernel_is_timed_and_its_race_reported(gpu, kernels):
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    with ldssan.sanitize() as col:
        us, counts = perf_us(kernels[1].launch, out, iters=2)
    assert us > 0 and counts == {"timed_racy_0": 2}
    assert col.violations and {v.code for v in col.violations} == {"LDS001"}
    assert all({v.site.text.strip(), v.other_site.text.strip()} == RACE_LINES for v in col.violations)


def test_event_timing_refuses_what_torch_refuses(gpu):
    plain, timed = torch.cuda.Event(), torch.cuda.Event(enable_timing=True)
    plain.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        plain.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="must be recorded.*test_vdevice_timing\\.py:\\d+"):
        timed.elapsed_time(torch.cuda.Event(enable_timing=True))


def test_a_cpu_only_profile_has_no_device_events(gpu, kernels):
    out = torch.zeros(N, dtype=torch.int32, device="cuda")
    with ldssan.sanitize():
        with tpf.profile(activities=[tpf.ProfilerActivity.CPU]) as prof:
            kernels[0].launch(out)
    assert not [e for e in prof.events() if "CUDA" in str(e.device_type)]


def test_uninstall_restores_the_profiler_and_the_launcher():
    if vdevice.active() or hook.enabled():
        pytest.skip("the outer session runs under ldssan")
    from ldssan.runtime.emu.launch import Launcher

    profile = torch.autograd.profiler.profile
    names = ("__init__", "_start_trace", "__exit__", "_parse_kineto_results")
    before = [profile.__dict__.get(n) for n in names], Launcher.__dict__["launch_kernel"]
    vdevice.install()
    assert [profile.__dict__.get(n) for n in names] != before[0]
    vdevice.uninstall()
    assert ([profile.__dict__.get(n) for n in names], Launcher.__dict__["launch_kernel"]) == before

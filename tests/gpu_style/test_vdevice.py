"""The virtual device itself, in process: what torch.cuda answers, how tensors move between
host and "GPU", what is refused, and that uninstall gives torch back exactly."""

from __future__ import annotations

import pytest
import torch

from ldssan import hook, vdevice
from ldssan.vdevice import VirtualDeviceError
from ldssan.vdevice._cuda import LDS_BYTES

_NAMES = ("is_available", "device_count", "get_device_properties", "Stream", "Event", "synchronize",
          "manual_seed", "graph", "current_stream")


@pytest.fixture
def fresh():
    """A process where nothing has installed the virtual device (not an outer ldssan session)."""
    if vdevice.active() or hook.enabled():
        pytest.skip("the outer session runs under ldssan; these tests install and remove it themselves")
    yield
    vdevice.uninstall()


@pytest.fixture
def gpu(fresh):
    vdevice.install()
    yield


def test_uninstall_restores_torch_exactly(fresh):
    before = {n: torch.cuda.__dict__.get(n) for n in _NAMES}
    modes = torch._C._len_torch_function_stack()
    available = torch.cuda.is_available()

    vdevice.install()
    assert torch.cuda.is_available() and torch._C._len_torch_function_stack() == modes + 1
    vdevice.uninstall()

    assert {n: torch.cuda.__dict__.get(n) for n in _NAMES} == before
    assert torch._C._len_torch_function_stack() == modes
    assert torch.cuda.is_available() == available
    assert not vdevice.on_device(torch.zeros(1))


def test_uninstall_gives_the_tensors_back_as_host_tensors(fresh):
    vdevice.install()
    dev = torch.ones(3, device="cuda")
    assert dev.is_cuda
    vdevice.uninstall()
    assert dev.device == torch.device("cpu") and not dev.is_cuda and "device=" not in repr(dev)
    assert (dev + torch.ones(3)).tolist() == [2, 2, 2]  # no mode left to refuse a mix


def test_the_device_describes_a_virtual_gfx1250(gpu):
    props = torch.cuda.get_device_properties(0)
    assert torch.cuda.device_count() == 1 and torch.cuda.current_device() == 0
    assert props.gcnArchName == "gfx1250" and props.warp_size == 32
    assert props.shared_memory_per_block == LDS_BYTES and props.multi_processor_count >= 1
    assert "gfx1250" in torch.cuda.get_device_name()


def test_transfers_copy_exactly_when_they_cross_sides(gpu):
    host = torch.arange(4.0)
    dev = host.cuda()
    assert vdevice.on_device(dev) and not vdevice.on_device(host)
    dev.add_(1)
    assert host.tolist() == [0, 1, 2, 3]  # .cuda() was a copy
    assert dev.cuda() is dev and dev.to("cuda:0") is dev
    snap = dev.cpu()
    dev.zero_()
    assert snap.tolist() == [1, 2, 3, 4] and not vdevice.on_device(snap)

    back = torch.zeros(4)
    back.copy_(dev)
    assert not vdevice.on_device(back)  # an in-place copy leaves the host tensor on the host
    assert vdevice.on_device(torch.empty_like(dev)) and vdevice.on_device(dev[1:])
    assert not vdevice.on_device(torch.zeros_like(dev, device="cpu"))
    assert vdevice.on_device(torch.ones(2, device=torch.device("cuda"))) and vdevice.on_device(torch.ones(2, device=0))
    torch.testing.assert_close(dev.cpu(), torch.zeros(4))
    torch.testing.assert_close(dev, torch.zeros(4), check_device=False)
    with pytest.raises(AssertionError, match="'device' do not match: cuda:0 != cpu"):
        torch.testing.assert_close(dev, torch.zeros(4))  # as on hardware: a GPU tensor is not a host one


def test_seeds_streams_and_events(gpu):
    torch.cuda.manual_seed(5)
    a = torch.randn(8, device="cuda")
    torch.cuda.manual_seed(5)
    assert torch.equal(a, torch.randn(8, device="cuda"))

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() is side
    assert torch.cuda.current_stream() == torch.cuda.default_stream() != side

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.ones(1000, device="cuda").sum()
    end.record()
    end.synchronize()
    assert end.query() and 0 < start.elapsed_time(end) < 60_000  # host wall time, in ms


def test_flydsl_reads_the_stream_handle(gpu):
    import flydsl.expr as fx

    def abi_value(stream):
        (ctype, fill), = fx.Stream(stream).__c_abi_spec__()
        slot = ctype()
        fill(fx.Stream(stream), slot)
        return slot.value or 0

    side = torch.cuda.Stream()
    assert abi_value(torch.cuda.current_stream()) == 0  # the null stream, as HIP spells it
    assert abi_value(side) == side.cuda_stream != 0


def test_unsupported_features_name_the_call_and_the_line(gpu):
    with pytest.raises(VirtualDeviceError, match=r"torch\.cuda\.graph is not supported.*test_vdevice\.py:\d+"):
        torch.cuda.graph(None)
    with pytest.raises(VirtualDeviceError, match="one GPU, cuda:0"):
        torch.zeros(2, device="cuda:1")


def test_hook_enable_installs_it_by_choice(fresh, monkeypatch):
    try:
        hook.enable(device="off")
        assert not vdevice.active()
        hook.disable()
        monkeypatch.setenv("FLYDSL_LDSSAN_DEVICE", "virtual")
        hook.enable()
        assert vdevice.active() and torch.cuda.is_available()
    finally:
        hook.disable()
    assert not vdevice.active()
    with pytest.raises(ValueError, match=r"enable\(device=.gpu.\): expected one of auto, off, virtual, emulated, hardware"):
        hook.enable(device="gpu")


def test_flyc_compile_with_virtual_gpu_tensors_launches_as_on_hardware(gpu):
    """FlyDSL launches `flyc.compile(jit, *args)` once when an argument is a live device
    buffer; a virtual-GPU tensor must count as one, or the output is never written."""
    import flydsl.compiler as flyc
    from flydsl.compiler import jit_function as jf

    from ldssan.kernels import rmsnorm as rms
    from ldssan.runtime.emu import emulate

    M, N = 2, 512
    x = torch.randn(M, N, device="cuda")
    gamma = torch.randn(N, device="cuda")
    out = torch.full((M, N), float("nan"), device="cuda")
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
    assert jf._has_live_device_argument(out) and not jf._is_compile_placeholder(out)
    host = torch.zeros(3)
    assert not jf._has_live_device_argument(host)  # a host tensor stays a placeholder
    with emulate(), rms.gfx1250_target("rmsnorm"):
        flyc.compile(rms._launch_rmsnorm, x, gamma, out, M, 1e-6, N)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_uninstall_restores_flydsls_launch_predicates(fresh):
    from flydsl.compiler import jit_function as jf

    from ldssan.runtime.emu import frontend

    frontend.install()  # the emulator's own seam stays for the process (vdevice.install puts it in first)
    before = (jf._has_live_device_argument, jf._is_compile_placeholder)
    vdevice.install()
    assert (jf._has_live_device_argument, jf._is_compile_placeholder) != before
    vdevice.uninstall()
    assert (jf._has_live_device_argument, jf._is_compile_placeholder) == before


@pytest.mark.parametrize("before", [True, False], ids=["default-set-before-install", "default-set-after-install"])
def test_set_default_device_cuda_allocates_on_the_virtual_gpu(fresh, before):
    """torch keeps set_default_device's DeviceContext at the bottom of the mode stack, whenever
    it was set; either way its factories land on the virtual GPU, and unsetting it works."""
    try:
        if before:
            torch.set_default_device("cuda")
        vdevice.install()
        if not before:
            torch.set_default_device("cuda")
        t = torch.zeros(2)
        assert vdevice.on_device(t) and t.device == torch.device("cuda", 0)
        torch.set_default_device(None)  # torch asserts its DeviceContext is at the bottom here
        assert not vdevice.on_device(torch.zeros(2))
    finally:
        torch.set_default_device(None)
        vdevice.uninstall()

"""Virtual-GPU tensors are GPU tensors to the user's code: `device`, `is_cuda`, `.cuda()`,
`.cpu()`, `.to(x.device)`, `torch.empty(..., device=x.device)`, `*_like`, dicts keyed by
device and `torch.cuda.current_device()` agree with hardware, while the storage stays host
memory the virtual gfx1250 reads. Each way of getting a GPU buffer feeds a clean kernel (the
output is right) and a racy one (the race is reported with its rule and both lines)."""

from __future__ import annotations

import pytest
import torch

import ldssan
from ldssan import hook, vdevice
from ldssan.runtime.emu.memory import in_host_memory

from ..neighbour import RACE_LINES, load_neighbour
from .installed import gpu  # noqa: F401  (the fixture)

N = 64
CUDA0 = torch.device("cuda", 0)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    clean = load_neighbour(tmp_path_factory.mktemp("clean"), name="neighbour_synced")
    racy = load_neighbour(tmp_path_factory.mktemp("racy"), name="neighbour_racy", sync=(), shift=32)
    return clean, racy


def _x():
    return torch.arange(N, dtype=torch.int32, device="cuda")


# Each makes the kernel's output buffer the way GPU test code does, from an input `x` on the GPU.
WAYS = {
    "empty(device=x.device)": lambda x: torch.empty(N, dtype=torch.int32, device=x.device).zero_(),
    "zeros_like(x)": lambda x: torch.zeros_like(x),
    "empty_like(x)": lambda x: torch.empty_like(x).fill_(0),
    "host.to(x.device)": lambda x: torch.zeros(N, dtype=torch.int32).to(x.device),
    "host.cuda()": lambda x: torch.zeros(N, dtype=torch.int32).cuda(),
    "x.new_zeros": lambda x: x.new_zeros(N),
    "cache[x.device]": lambda x: {torch.device("cuda", 0): torch.zeros(N, dtype=torch.int32, device="cuda:0")}[x.device],
    "current_device()": lambda x: torch.zeros(N, dtype=torch.int32, device=torch.cuda.current_device()),
    "set_default_device": lambda x: _default_device_zeros(),
}


def _default_device_zeros():
    torch.set_default_device("cuda")
    try:
        return torch.zeros(N, dtype=torch.int32)
    finally:
        torch.set_default_device(None)


def _is_gpu_tensor(t) -> bool:
    return t.device == CUDA0 and t.is_cuda and not t.is_cpu and t.get_device() == 0 and in_host_memory(t)


@pytest.mark.parametrize("way", WAYS)
def test_a_gpu_buffer_made_this_way_runs_a_clean_kernel_right(gpu, kernels, way):
    out = WAYS[way](_x())
    assert _is_gpu_tensor(out), (way, out.device)
    with ldssan.sanitize() as col:
        kernels[0].launch(out)
    assert len(col.results) == 1 and not col.violations
    host = out.cpu()
    assert type(host) is torch.Tensor and host.device == torch.device("cpu") and not host.is_cuda
    assert host.tolist() == [(i + 1) % N * 10 for i in range(N)]


@pytest.mark.parametrize("way", WAYS)
def test_a_gpu_buffer_made_this_way_reports_a_racy_kernels_race(gpu, kernels, way):
    out = WAYS[way](_x())
    assert _is_gpu_tensor(out), (way, out.device)
    with ldssan.sanitize() as col:
        kernels[1].launch(out)
    (v,) = {(v.code, v.site.text.strip(), v.other_site.text.strip()): v for v in col.violations}.values()
    assert v.code == "LDS001" and {v.site.text.strip(), v.other_site.text.strip()} == RACE_LINES


def test_results_follow_their_inputs_and_transfers_copy(gpu):
    x = _x()
    assert x.device == CUDA0 and x.device.type == "cuda" and x.device.index == 0
    assert torch.cuda.current_device() == x.device.index
    assert {torch.device("cuda:0"): "gpu"}[x.device] == "gpu" and {CUDA0: 1}[(x + 1).device] == 1
    for t in (x + 1, x[1:], x.view(8, 8), x.float(), torch.empty_like(x), torch.ones_like(x),
              torch.full_like(x, 3), torch.rand_like(x.float()), x.clone(), x.sum()):
        assert _is_gpu_tensor(t)
    assert x.cuda() is x and x.to(x.device) is x and x.to("cuda:0") is x
    host = x.cpu()
    assert type(host) is torch.Tensor and host.device.type == "cpu" and not host.is_cuda
    assert host.data_ptr() != x.data_ptr()  # a snapshot, as on hardware
    assert torch.zeros_like(x, device="cpu").device.type == "cpu"
    assert torch.empty(2, device=host.device).device.type == "cpu"
    assert x.type() == "torch.cuda.IntTensor" and "device='cuda:0'" in repr(x)
    assert x.float().type_as(host).device.type == "cpu"  # type_as(host tensor) moves to the host


def test_modules_and_parameters_move_with_their_storage(gpu):
    x = torch.randn(4, 3, device="cuda")
    layer = torch.nn.Linear(3, 2).cuda()
    assert layer.weight.device == CUDA0 and layer(x).device == CUDA0
    assert torch.nn.Parameter(x).device == CUDA0
    moved = torch.nn.Linear(3, 2).to(x.device)
    assert moved.bias.is_cuda and moved.cpu().bias.device.type == "cpu"


def test_mixing_a_host_tensor_into_a_gpu_op_fails_as_on_hardware(gpu):
    x = torch.ones(4, device="cuda")
    host = torch.ones(4)
    for op in (lambda: x + host, lambda: torch.cat([x, host]), lambda: torch.mm(x.view(2, 2), host.view(2, 2))):
        with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*cuda:0 and cpu.*"
                                               r"test_vdevice_identity\.py:\d+"):
            op()
    # what hardware allows: host scalars, copies both ways, indexing with host indices
    assert (x * torch.tensor(2.0)).tolist() == [2, 2, 2, 2] and (x * torch.tensor(2.0)).is_cuda
    x.copy_(torch.arange(4.0))
    host.copy_(x)
    assert host.tolist() == [0, 1, 2, 3] and not host.is_cuda
    assert x[torch.tensor([3, 0])].tolist() == [3, 0]
    x[torch.tensor([0])] = torch.tensor(9.0)
    assert x.tolist() == [9, 1, 2, 3] and x.view_as(host).is_cuda


def _function_launching(kernel, launches: dict):
    """An autograd Function whose forward and backward each launch `kernel` into a buffer
    made with `device=x.device`, and key their launcher cache by device, as GPU code does."""

    class Launching(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            launches.setdefault(x.device, kernel.launch)  # a device-keyed launcher cache
            out = torch.zeros(N, dtype=torch.int32, device=x.device)
            launches[x.device](out)
            ctx.save_for_backward(x)
            return x * 2, out

        @staticmethod
        def backward(ctx, grad, _grad_out):
            (x,) = ctx.saved_tensors
            assert x.device == grad.device == CUDA0, (x.device, grad.device)  # GPU tensors in backward too
            out = torch.zeros(N, dtype=torch.int32, device=grad.device)
            launches[grad.device](out)  # KeyError if backward saw the host
            launches["backward"] = out.cpu()
            return grad * 2

    return Launching


@pytest.mark.parametrize("racy", [False, True], ids=["clean", "racy"])
def test_a_custom_functions_backward_sees_gpu_tensors(gpu, kernels, racy):
    launches: dict = {}
    x = torch.ones(4, device="cuda", requires_grad=True)
    with ldssan.sanitize() as col:
        y, out = _function_launching(kernels[racy], launches).apply(x)
        y.sum().backward()
    assert len(col.results) == 2 and x.grad.is_cuda and x.grad.tolist() == [2, 2, 2, 2]
    if racy:
        assert col.violations and all(v.code == "LDS001" and {v.site.text.strip(), v.other_site.text.strip()}
                                      == RACE_LINES for v in col.violations)
    else:
        assert not col.violations
        want = [(i + 1) % N * 10 for i in range(N)]
        assert out.cpu().tolist() == want and launches["backward"].tolist() == want


def test_uninstall_restores_autograd():
    if vdevice.active() or hook.enabled():
        pytest.skip("the outer session runs under ldssan")
    function, backward = torch.autograd.Function, torch.autograd.function.BackwardCFunction
    before = function.__dict__["apply"], backward.__dict__["apply"]
    vdevice.install()
    assert (function.__dict__["apply"], backward.__dict__["apply"]) != before
    vdevice.uninstall()
    assert (function.__dict__["apply"], backward.__dict__["apply"]) == before

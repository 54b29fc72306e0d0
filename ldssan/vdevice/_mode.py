"""The torch function mode that puts "cuda" tensors in host memory.

Every torch call passes through `DeviceMapMode.__torch_function__` while the virtual device
is installed. A `device=` that names the GPU becomes `cpu`; `Tensor.cuda()`, `.to("cuda")`,
`.cpu()` and `.to("cpu")` are handled here. Tensors that are "on the GPU" carry a tag, and
every result computed from a tagged tensor is tagged too, so host<->device transfers copy
exactly when they would on hardware: `x.cuda()` of a host tensor is a new tensor,
`y.cpu()` of a device tensor is a snapshot — a test that keeps `first = out.cpu()` and
relaunches compares two different buffers, as it would on a GPU.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ._errors import unsupported

_TAG = "_ldssan_virtual_gpu"
_Tensor = torch.Tensor


def cuda_index(device) -> int | None:
    """The GPU index `device` names (always 0 here), or None if it is not the GPU."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        index = device  # a bare int in a device= argument means cuda:<int>
    else:
        try:
            dev = torch.device(device)
        except (TypeError, RuntimeError):
            return None
        if dev.type != "cuda":
            return None
        index = 0 if dev.index is None else dev.index
    if index != 0:
        raise unsupported(f"device {device!r}", "the virtual device is one GPU, cuda:0; multi-GPU tests need "
                          "real hardware")
    return index


def on_device(t) -> bool:
    """True for a tensor that lives on the virtual GPU."""
    return isinstance(t, _Tensor) and t.__dict__.get(_TAG, False)


def _tag(out: torch.Tensor) -> torch.Tensor:
    out.__dict__[_TAG] = True
    return out


def _tag_results(out, args, kwargs) -> None:
    """Tag the new tensors among `out`; an input returned as is (in-place ops, `out=`) keeps
    its side: `host.copy_(gpu_tensor)` leaves `host` on the host."""
    inputs = {id(a) for a in (*args, *kwargs.values()) if isinstance(a, _Tensor)}
    for o in (out if isinstance(out, (tuple, list)) else (out,)):
        if isinstance(o, _Tensor) and id(o) not in inputs:
            o.__dict__[_TAG] = True


def _any_on_device(args, kwargs) -> bool:
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            if a.__dict__.get(_TAG, False):
                return True
        elif isinstance(a, (tuple, list)):
            if any(isinstance(x, _Tensor) and x.__dict__.get(_TAG, False) for x in a):
                return True
    return False


def _move(self, to_gpu: bool, dtype=None, copy=False, memory_format=torch.preserve_format):
    """`self` moved to the GPU (to_gpu) or the host: a copy when it changes sides."""
    crossing = on_device(self) != to_gpu
    out = _Tensor.to(self, dtype=dtype or self.dtype, copy=copy or crossing, memory_format=memory_format)
    if out is not self:
        if to_gpu:
            _tag(out)
        else:
            out.__dict__.pop(_TAG, None)
    return out


def _to(self, *args, **kwargs):
    if args and isinstance(args[0], _Tensor):
        # to(other): other's device and dtype
        other = args[0]
        return _move(self, on_device(other), other.dtype, kwargs.get("copy", False))
    copy = kwargs.pop("copy", False)
    dev_arg = kwargs.get("device", args[0] if args and not isinstance(args[0], torch.dtype) else None)
    gpu = cuda_index(dev_arg) is not None
    if gpu:
        if args and args[0] is dev_arg:
            args = ("cpu", *args[1:])
        else:
            kwargs["device"] = "cpu"
    device, dtype, _non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    memory_format = memory_format or torch.preserve_format
    if device is None:
        # dtype / memory format only: stays where it is
        return _move(self, on_device(self), dtype, copy, memory_format)
    if device.type != "cpu":
        return _Tensor.to(self, *args, copy=copy, **kwargs)  # e.g. "meta": not ours to map
    return _move(self, gpu, dtype, copy, memory_format)


def _cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    cuda_index("cuda" if device is None else device)
    return _move(self, True, memory_format=memory_format)


def _cpu(self, memory_format=torch.preserve_format):
    return _move(self, False, memory_format=memory_format)


def _pin_memory(self, device=None):
    # pinned host memory is a host tensor; the copy keeps the "new tensor" semantics
    return self.clone()


def _record_stream(self, stream):
    return None  # no allocator to tell: host memory lives as long as the tensor


_METHODS = {
    _Tensor.to: _to,
    _Tensor.cuda: _cuda,
    _Tensor.cpu: _cpu,
    _Tensor.pin_memory: _pin_memory,
    _Tensor.record_stream: _record_stream,
}


class DeviceMapMode(TorchFunctionMode):
    """Maps the GPU device onto host memory for every torch call (see the module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs) if kwargs else {}
        special = _METHODS.get(func)
        if special is not None:
            return special(*args, **kwargs)
        # an explicit device= decides the side; otherwise results follow their inputs
        explicit = kwargs.get("device") is not None
        to_gpu = explicit and cuda_index(kwargs["device"]) is not None
        if to_gpu:
            kwargs["device"] = "cpu"
        kwargs.pop("pin_memory", None)  # pinned host buffers are plain host buffers here
        out = func(*args, **kwargs)
        if to_gpu or (not explicit and _any_on_device(args, kwargs)):
            _tag_results(out, args, kwargs)
        return out

"""The torch function mode that puts "cuda" tensors in host memory and makes them GPU tensors.

Every torch call, and every read of a tensor's `device` / `is_cuda` / `is_cpu`, passes
through `DeviceMapMode.__torch_function__` while the virtual device is installed. A `device=`
that names the GPU allocates host memory and marks its *storage* as the virtual GPU's;
`Tensor.cuda()`, `.to("cuda")`, `.cpu()` and `.to("cpu")` are handled here. The mark is on
the storage, as a device is on hardware: views, `.data =`, `nn.Parameter(x)` and in-place
results share it; every new result computed from GPU tensors gets it. A marked tensor reports
`device == torch.device("cuda", 0)`, `is_cuda`, `get_device() == 0`, and prints
`device='cuda:0'`, so `torch.empty(..., device=x.device)`, `x.to(y.device)`, `*_like(x)` and
dicts keyed by `x.device` agree with hardware. Host<->device transfers copy exactly when they
would on hardware: `x.cuda()` of a host tensor is a new tensor, `y.cpu()` of a device tensor
is a plain CPU tensor and a snapshot.

As on hardware, an op that mixes a GPU tensor with a host tensor of one or more dimensions
raises torch's "Expected all tensors to be on the same device"; a 0-dim host tensor is a
scalar and mixes freely, and copies, indexing with host indices, `new_tensor(host)` and the
shape-only `view_as` / `expand_as` / `reshape_as` are allowed, as there. What stays host:
`data_ptr()` is a host address (the virtual gfx1250 reads it), DLPack exports describe host
memory, `.numpy()` works. Outside this mode (after `uninstall()`, in another thread) the
tensors are the plain CPU tensors they always were.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ._errors import caller, unsupported

_TAG = "_ldssan_virtual_gpu"  # set on the storage of virtual-GPU memory
_Tensor = torch.Tensor
CUDA0 = torch.device("cuda", 0)


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


def _storage(t):
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None  # sparse / nested tensors have no single storage: never on the virtual GPU


def on_device(t) -> bool:
    """True for a tensor that lives on the virtual GPU: its storage is marked. The answer is
    kept on the tensor too (a tensor changes storage only through `.data =` / `set_`, which
    drop it), so the per-call scan of arguments is one dict look-up per tensor."""
    if not isinstance(t, _Tensor):
        return False
    d = t.__dict__
    side = d.get(_TAG)
    if side is None:
        s = _storage(t)
        side = d[_TAG] = s is not None and s.__dict__.get(_TAG, False)
    return side


def _tag(out: torch.Tensor) -> torch.Tensor:
    s = _storage(out)
    if s is not None:
        s.__dict__[_TAG] = out.__dict__[_TAG] = True
    return out


def _scan(args, kwargs) -> tuple[bool, bool, _Tensor | None]:
    """(a GPU tensor is among the arguments, a host tensor is, the first host one of 1+ dims)."""
    gpu = host = False
    wide = None
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, _Tensor):
            group = (a,)
        elif isinstance(a, (tuple, list)):
            group = a
        else:
            continue
        for t in group:
            if not isinstance(t, _Tensor):
                continue
            if on_device(t):
                gpu = True
            else:
                host = True
                if wide is None and t.dim() > 0:
                    wide = t
    return gpu, host, wide


def _host_storages(args, kwargs) -> set[int]:
    found = set()
    for a in (*args, *kwargs.values()):
        for t in (a,) if isinstance(a, _Tensor) else a if isinstance(a, (tuple, list)) else ():
            if isinstance(t, _Tensor) and not on_device(t):
                found.add(id(_storage(t)))
    return found


def _tag_results(out, args, kwargs, host: bool, copy_aliases: bool = False):
    """Mark the new tensors among `out` as the GPU's. A result that shares a host input's
    storage (in-place ops, `out=`, views of a host tensor) stays on the host; with
    `copy_aliases` (an explicit device="cuda") it is copied to the GPU instead, as hardware
    would. Without host inputs every result is new or a view of GPU memory: no look-up."""
    if isinstance(out, _Tensor) and not host:
        return _tag(out)
    many = isinstance(out, (tuple, list))
    results = list(out) if many else [out]
    aliased = _host_storages(args, kwargs) if host else set()
    for i, o in enumerate(results):
        if not isinstance(o, _Tensor) or o.__dict__.get(_TAG):
            continue
        if id(_storage(o)) not in aliased:
            _tag(o)
        elif copy_aliases:
            results[i] = _tag(o.clone())
    if not copy_aliases:
        return out
    return type(out)(results) if many else results[0]


def _mixed(func, host: _Tensor) -> RuntimeError:
    try:
        name = torch.overrides.resolve_name(func)
    except Exception:  # resolve_name walks torch's namespaces; any failure only loses the name
        name = None
    name = name or getattr(func, "__qualname__", None) or repr(func)
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! "
        f"(ldssan virtual gfx1250, as on a GPU: {name} at {caller()} got a host tensor of shape "
        f"{tuple(host.shape)}; move it with .cuda() or .to(x.device))")


def _move(self, to_gpu: bool, dtype=None, copy=False, memory_format=torch.preserve_format):
    """`self` moved to the GPU (to_gpu) or the host: a copy when it changes sides."""
    crossing = on_device(self) != to_gpu
    out = _Tensor.to(self, dtype=dtype or self.dtype, copy=copy or crossing, memory_format=memory_format)
    if out is not self:
        if to_gpu:
            _tag(out)
        else:
            out.__dict__[_TAG] = False  # a fresh host storage
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


def _device(self):
    return CUDA0 if on_device(self) else _Tensor.device.__get__(self)


def _is_cuda(self):
    return on_device(self)


def _is_cpu(self):
    return not on_device(self) and _Tensor.is_cpu.__get__(self)


def _get_device(self):
    return 0 if on_device(self) else _Tensor.get_device(self)


def _type(self, dtype=None, non_blocking=False, **kwargs):
    if dtype is None and not kwargs and on_device(self):
        return _Tensor.type(self).replace("torch.", "torch.cuda.", 1)  # 'torch.cuda.FloatTensor'
    out = _Tensor.type(self, dtype, non_blocking, **kwargs)
    return _tag(out) if on_device(self) and out is not self else out


def _type_as(self, other):
    return _move(self, on_device(other), other.dtype)  # other's device and dtype, as on hardware


def _rebinds(func):
    """`.data = other` / `set_(...)`: the tensor takes another storage; its kept answer goes."""

    def rebind(self, *args, **kwargs):
        out = func(self, *args, **kwargs)
        self.__dict__.pop(_TAG, None)
        return out

    return rebind


class _Repr:
    """`repr` with the mode active, so torch's printer sees the device and adds device='cuda:0'."""

    def __init__(self, mode: "DeviceMapMode"):
        self.mode = mode

    def __call__(self, t, *args, **kwargs):
        if not on_device(t):
            return _Tensor.__repr__(t, *args, **kwargs)
        with self.mode:
            return torch._tensor_str._str(t, *args, **kwargs)


_METHODS = {
    _Tensor.to: _to,
    _Tensor.cuda: _cuda,
    _Tensor.cpu: _cpu,
    _Tensor.pin_memory: _pin_memory,
    _Tensor.record_stream: _record_stream,
    _Tensor.device.__get__: _device,
    _Tensor.is_cuda.__get__: _is_cuda,
    _Tensor.is_cpu.__get__: _is_cpu,
    _Tensor.get_device: _get_device,
    _Tensor.type: _type,
    _Tensor.type_as: _type_as,
    _Tensor.data.__set__: _rebinds(_Tensor.data.__set__),
    _Tensor.set_: _rebinds(_Tensor.set_),
}

# ops a GPU tensor may share with a host tensor on hardware too (see the module doc)
_MIXING_OK = frozenset({
    _Tensor.copy_, _Tensor.__getitem__, _Tensor.__setitem__, _Tensor.index_put_, _Tensor.index_put,
    torch.index_put, _Tensor.new_tensor, _Tensor.view_as, _Tensor.expand_as, _Tensor.reshape_as,
    _Tensor.data.__set__, _Tensor.is_set_to, _Tensor.is_same_size, torch.is_same_size,
    torch._has_compatible_shallow_copy_type, torch.result_type, torch.broadcast_tensors,
})


def _default_device(func):
    """The device `torch.set_default_device` gives a factory call without `device=`, or None.
    torch keeps that DeviceContext at the bottom of the mode stack, below this mode, so the
    device it would add is looked up here."""
    from torch.utils._device import DeviceContext, _device_constructors

    if func not in _device_constructors():
        return None
    for i in range(torch._C._len_torch_function_stack()):
        mode = torch._C._get_function_stack_at(i)
        if isinstance(mode, DeviceContext):
            return mode.device
    return None


class DeviceMapMode(TorchFunctionMode):
    """Maps the GPU device onto host memory for every torch call (see the module doc)."""

    def __init__(self):
        super().__init__()
        self._methods = {**_METHODS, _Tensor.__repr__: _Repr(self)}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs) if kwargs else {}
        special = self._methods.get(func)
        if special is not None:
            return special(*args, **kwargs)
        # an explicit device= decides the side; otherwise results follow their inputs
        if kwargs.get("device") is None and torch._C._len_torch_function_stack():
            default = _default_device(func)
            if default is not None:
                kwargs["device"] = default
        explicit = kwargs.get("device") is not None
        to_gpu = explicit and cuda_index(kwargs["device"]) is not None
        if to_gpu:
            kwargs["device"] = "cpu"
        kwargs.pop("pin_memory", None)  # pinned host buffers are plain host buffers here
        gpu, host, wide = _scan(args, kwargs)
        if gpu and wide is not None and func not in _MIXING_OK:
            raise _mixed(func, wide)
        out = func(*args, **kwargs)
        if to_gpu or (gpu and not explicit):
            out = _tag_results(out, args, kwargs, host, copy_aliases=to_gpu)
        return out

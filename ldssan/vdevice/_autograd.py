"""Custom autograd Functions' backward on the virtual GPU.

torch's autograd engine runs a backward pass with the torch function mode stack empty, so
inside a `torch.autograd.Function.backward` the device mode is not there: GPU tensors would
read as CPU ones and caches keyed by `x.device` would miss (FlyDSL's RMSNorm keys its
backward launchers so). A Function applied to GPU tensors marks its backward node; that
node's backward runs with the mode, its incoming gradients on the GPU, as on hardware.
"""

from __future__ import annotations

import torch

from ._mode import _tag, on_device

_FUNCTION = torch.autograd.Function
_BACKWARD = torch.autograd.function.BackwardCFunction
_MARK = "_ldssan_virtual_gpu"


def _apply(orig):
    def apply(cls, *args, **kwargs):
        out = orig.__get__(None, cls)(*args, **kwargs)
        if any(on_device(a) for a in (*args, *kwargs.values())):
            for o in out if isinstance(out, (tuple, list)) else (out,):
                node = getattr(o, "grad_fn", None) if isinstance(o, torch.Tensor) else None
                if node is not None:
                    setattr(node, _MARK, True)
        return out

    return classmethod(apply)


def _backward(orig, mode):
    def apply(self, *args):
        if not getattr(self, _MARK, False) or torch._C._len_torch_function_stack():
            return orig(self, *args)
        for a in args:
            if isinstance(a, torch.Tensor) and not on_device(a):
                _tag(a)  # the gradient of a GPU output is a GPU tensor
        with mode:
            return orig(self, *args)

    return apply


def patches(mode) -> list:
    """`Function.apply` marks the backward node of GPU inputs; the node's `apply` runs under
    `mode` (applied by `runtime.seam`)."""
    return [(_FUNCTION, "apply", _apply), (_BACKWARD, "apply", lambda orig: _backward(orig, mode))]

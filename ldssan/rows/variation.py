"""Variation: run the same call K times under different scheduler policies and find the
output elements that are not bitwise identical across the runs (or differ from a reference)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ldssan.passes.ir.errors import UsageError
from ldssan.runtime.emu.sched import OUTPUT_POLICIES, Policy


class RowsError(UsageError, ValueError):
    """Something `ldssan rows` cannot work with (a bad function result, too few runs, ...)."""


def policies(runs: int, given=None) -> list[Policy]:
    """`runs` policies: the given ones, else OUTPUT_POLICIES then random(seed) orders with
    alternating copy completion (late / random / early); each is replayable from its text."""
    if given:
        try:
            out = [p if isinstance(p, Policy) else Policy.parse(str(p)) for p in given]
        except ValueError as exc:
            raise RowsError(str(exc)) from None
        if len(out) < runs:
            raise RowsError(f"{len(out)} policies given for {runs} runs")
        return out[:runs]
    out = list(OUTPUT_POLICIES[:runs])
    comps = ("late", "random", "early")
    seed = 10
    while len(out) < runs:
        out.append(Policy("random", seed, comps[seed % 3]))
        seed += 1
    return out


def named_outputs(result) -> list[tuple[str, torch.Tensor]]:
    """The tensors a user function returned: a tensor, a tuple/list, or a dict."""
    if isinstance(result, torch.Tensor):
        items = [("out", result)]
    elif isinstance(result, dict):
        items = [(str(k), v) for k, v in result.items()]
    elif isinstance(result, (tuple, list)):
        items = [(f"out{i}", v) for i, v in enumerate(result)]
    else:
        raise RowsError(f"the function must return a tensor, a tuple or a dict of tensors, "
                        f"got {type(result).__name__}")
    for name, t in items:
        if not isinstance(t, torch.Tensor):
            raise RowsError(f"output {name!r} is a {type(t).__name__}, not a torch.Tensor")
    return items


def snapshot(result) -> list[tuple[str, torch.Tensor]]:
    """Detached CPU copies (a later run must not overwrite an earlier run's output)."""
    return [(n, t.detach().to("cpu").clone()) for n, t in named_outputs(result)]


def _bits(t: torch.Tensor) -> np.ndarray:
    """The tensor's elements as unsigned integers of the same width: bitwise comparison
    (NaN == NaN with the same payload, -0.0 != 0.0)."""
    a = t.contiguous()
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.view(width).numpy() if a.dtype.is_floating_point or a.dtype == torch.bool else a.numpy()


@dataclass
class Variation:
    name: str
    shape: tuple[int, ...]
    varying: np.ndarray  # bool, the output's shape: differs between runs, or from the reference
    # bool: bitwise identical in every run but not close to the reference (no schedule changed
    # it: a wrong kernel or a wrong reference); a subset of `varying`
    mismatch: np.ndarray | None = None


def compare(runs: list[list[tuple[str, torch.Tensor]]], reference=None, *, rtol=1e-3, atol=1e-5) -> list[Variation]:
    """Per output: elements not bitwise identical over the runs, or (with a reference) not
    close to it in some run. Every run must give each output the same shape and dtype:
    bits of different dtypes do not compare (a bf16 copy of a float32 output is not the
    same value)."""
    first = runs[0]
    ref = dict(reference) if reference else {}
    out = []
    for i, (name, t0) in enumerate(first):
        base = _bits(t0)
        differs = np.zeros(base.shape, dtype=bool)
        for k, run in enumerate(runs[1:], 2):
            other = run[i][1]
            if tuple(other.shape) != tuple(t0.shape):
                raise RowsError(f"output {name!r} changed shape between runs: {tuple(t0.shape)} vs {tuple(other.shape)}")
            if other.dtype != t0.dtype:
                raise RowsError(f"output {name!r} is {dtype_name(t0)} in run 1 but {dtype_name(other)} in run {k}: "
                                "the runs must have the same dtype to be compared bit for bit")
            differs |= _bits(other) != base
        off_reference = np.zeros(base.shape, dtype=bool)
        if name in ref:
            r = ref[name].detach().to("cpu")
            if tuple(r.shape) != tuple(t0.shape):
                raise RowsError(f"reference {name!r} has shape {tuple(r.shape)}, the output {tuple(t0.shape)}")
            for run in runs:
                got = run[i][1]
                if got.dtype.is_floating_point:
                    close = torch.isclose(got.double(), r.double(), rtol=rtol, atol=atol, equal_nan=True)
                else:
                    close = got == r.to(got.dtype)
                off_reference |= ~close.numpy()
        out.append(Variation(name, tuple(t0.shape), differs | off_reference, off_reference & ~differs))
    return out


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def check_tolerance(flag: str, value: float) -> float:
    """A --rtol/--atol value: a finite number >= 0 (torch.isclose refuses the others, after
    every run)."""
    if not (isinstance(value, (int, float)) and 0 <= value < float("inf")):
        raise RowsError(f"{flag} {value!r}: expected a finite number >= 0")
    return float(value)

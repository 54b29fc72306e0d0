"""The neighbour-exchange kernel that several tests write into a file of their own (a child
process, a pytester suite, a module the pass reads): every lane stores ``tid * 10`` into an
LDS array, runs the given sync lines, then reads lane ``(tid + shift) % N``'s value.

One source text, so a test states only what it varies: the kernel's name, its sync lines
(none for the racy variant) and the neighbour distance.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

IMPORTS = "import torch, flydsl.compiler as flyc, flydsl.expr as fx\n"
#: the two lines a racy neighbour kernel (no sync, shift 32) is reported at
RACE_LINES = {"lds[tid] = fx.Int32(tid) * 10", "Out[tid] = lds[(tid + 32) % N]"}


def neighbour_source(name: str = "neighbour", sync: tuple[str, ...] = ("fx.gpu.barrier()",),
                     shift: int = 1, n: int = 64) -> str:
    """`N`, the kernel `name(Out)` and its host launcher `launch(Out, stream)` (one workgroup
    of `N` lanes), as module-level source text."""
    body = "".join(f"    {line}\n" for line in sync)
    return (f"N = {n}\n\n"
            "@flyc.kernel\n"
            f"def {name}(Out: fx.Tensor):\n"
            "    tid = fx.thread_idx.x\n"
            "    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, N]).peek()\n"
            "    lds[tid] = fx.Int32(tid) * 10\n"
            f"{body}"
            f"    Out[tid] = lds[(tid + {shift}) % N]\n\n"
            "@flyc.jit\n"
            "def launch(Out: fx.Tensor, stream: fx.Stream = fx.Stream(None)):\n"
            f"    {name}(Out).launch(grid=(1, 1, 1), block=(N, 1, 1), stream=stream)\n")


def load_neighbour(directory: Path, **kwargs) -> ModuleType:
    """Write `IMPORTS + neighbour_source(**kwargs)` as a module in `directory` and import it
    (the pass reads a kernel's own file, so the kernel must live in one)."""
    path = Path(directory) / "neighbour_kernel.py"
    path.write_text(IMPORTS + neighbour_source(**kwargs))
    spec = importlib.util.spec_from_file_location(f"_neighbour_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod

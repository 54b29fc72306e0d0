"""What the planner and the loop compiler hand each other: an op's (or a whole loop's) C for
one lane, the values it reads from outside, and the buffer windows it touches."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from ldssan.passes.ir.irview import Op
from .cops import Elem, elem_of, width_of
from .runs import Slot

MAX_WIDTH = 64  # elements per lane of a value a run holds (C arrays on the stack)


@dataclass(frozen=True)
class In:
    """A value a run reads: its Python expression at the call and its C array."""

    expr: str
    cname: str
    elem: Elem
    width: int
    varying: bool | None  # None: either shape (a buffer descriptor field); read per lane

    @property
    def slot(self) -> Slot:
        return Slot(self.elem.dtype, self.width, self.varying)


Window = tuple[str, str, bool]  # a buffer access: the C names of its base and num_records, a store?


def window_token(w: Window) -> str:
    """Where a buffer access's C names its window's index in D (numbered per run)."""
    return f"WINDOW({w[0]},{w[1]},{int(w[2])})"


@dataclass
class Compiled:
    """One op's C and what it reads from outside itself (a loop: its whole nest)."""

    op: Op
    lines: list[str]
    ins: list[In]
    windows: list[Window] = field(default_factory=list)
    # written before the run's call: Python lines, or ops (a loop's constants) to translate
    before: list[str | Op] = field(default_factory=list)
    after: list[str] = field(default_factory=list)  # Python written when the call succeeds

    size: int = 1  # ops compiled (a loop: its body's too)
    # a loop that stores runs its iterations around the lane loop: the C opening it (after
    # the uniform inputs are read) and closing it; such a run holds this loop alone
    iterations: tuple[list[str], str] | None = None
    reads: list[int] | None = None  # values read (None: the op's operands; a loop: its nest's)
    # a cross-lane op: starts a stage of the run, reading `source` of other lanes (crosslane.py)
    cross: bool = False
    source: str | None = None

    def __post_init__(self):
        if self.reads is None:
            self.reads = list(self.op.operands)

    @property
    def stores(self) -> bool:
        return any(w[2] for w in self.windows)


TOKEN = re.compile(r"WINDOW\([^)]*\)")
AT = re.compile(r"AT\((\w+);(\w+)\)")  # lane i's elements of a run value (crosslane.py)


def declare(results, types) -> list[str]:
    """C arrays for an op's results."""
    return [f"{elem_of(ty).c} v{r}[{width_of(ty)}];" for r, ty in zip(results, types)]


class OpCompiler(Protocol):
    """What compiling a loop asks of the planner (`plan.Planner`)."""

    t: object  # the translator: uniformity, value names, temporaries

    def compile(self, op: Op, lanewise: bool = False) -> Compiled | None: ...

    def value_in(self, v: int, ty) -> In | None: ...

    def literal(self, v: int, ty) -> str | None: ...

    def mask_in(self) -> In: ...

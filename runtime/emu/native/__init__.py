"""Native runs of the virtual gfx1250: the lane-wise ops of a lockstep translation compiled
to C for the host CPU (the first slice of the compiled executor, issue #27).

`plan` picks the runs while the translator writes a block, `cops` writes each op's C (the
exact twin of its Python emitter), `runtime/cc.py` compiles a translation's runs into one
shared object (cached on disk), `runs` calls a run at run time. The interpreter stays the
reference: a run whose inputs are not as expected, or that did not build, runs its ops'
Python lines instead, and tests compare the two bit for bit.
"""

from ...cc import NativeBuildError, cached, estimate_seconds, load
from .plan import Planner
from .runs import NativeRun, call

__all__ = ["NativeBuildError", "NativeRun", "Planner", "cached", "call", "estimate_seconds", "load"]

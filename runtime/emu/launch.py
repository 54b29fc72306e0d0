"""Launching on the virtual gfx1250: the host launcher and the launch of each kernel.

FlyDSL's own host function (`func.func @<jit name>`) is translated like a kernel (one
lane) and run with the packed argument values (decoded by hostargs.py), so grid, block,
dynamic LDS and argument layout come from FlyDSL. Its `gpu.launch_func` lands in
`Launcher.launch_kernel`, which checks the launch's `plan.Geometry`, decides its
`plan.LaunchPlan` (strategy, lockstep, batch, resident workgroups, and why) and hands both
to the strategy's runner (runners.py), which runs the waves under the scheduler (sched.py).
"""

from __future__ import annotations

import time

import numpy as np

from ldssan.passes.ir.irview import ModuleView

from . import taint as _taint
from .codegen import translate
# EmuLaunchError, bind_pointers, host_arguments, batch_option: the launch API as frontend.py
# and __init__.py import it from here
from .errors import EmuLaunchError  # noqa: F401
from .hostargs import bind_pointers, host_arguments  # noqa: F401
from .limits import Limits
from .memory import GlobalMemory
from .plan import AUTO, Geometry, batch_option, plan_launch  # noqa: F401
from .runners import RUNNERS, LaunchRecord, LaunchRun
from .sched import Policy


class Launcher:
    """Runs the launches of one host call against `gmem`."""

    def __init__(self, view: ModuleView, gmem: GlobalMemory, *, policy: Policy, batch: int = 1,
                 ir_key: str = "", sanitizer=None, resident: int = 1, time_limit: float | None = None,
                 step_budget: int | None = None, native: str = "auto"):
        self.view = view
        self.gmem = gmem
        self.policy = policy
        self.batch = AUTO if batch == AUTO else max(1, batch)
        # CPU seconds per launch / loop iterations per scheduler run (None: auto, limits.py)
        self.limits = Limits(time_limit, step_budget)
        # workgroups resident at once, interleaved by the scheduler (persistent kernels,
        # cross-workgroup flags); exclusive with batching
        self.resident = max(1, resident)
        self.ir_key = ir_key
        self.sanitizer = sanitizer  # object with .begin_batch(...) -> per-wave hooks, or None
        self.records: list[LaunchRecord] = []
        self.native = native  # "auto" | "on" | "off": lockstep runs of lane-wise ops in C (runners.LaunchRun)

    def _key(self, name: str) -> str | None:
        # no content hash -> no caching (a stale translation must never run)
        return f"{self.ir_key}:{name}" if self.ir_key else None

    def run_host(self, host_name: str, values: list) -> None:
        prog = translate(self.view, host_name, cache_key=self._key(f"host:{host_name}"))
        ctx = HostCtx(self)
        gen = prog.wave_fn(ctx, tuple(values))
        try:
            for _ in gen:
                raise RuntimeError("ldssan-emu: the host launcher yielded (barrier or wait on the host?)")
        except Exception as exc:  # fail closed: an ldssan error naming the host op (a kernel's own error passes)
            err = prog.failure(exc, "the host launcher")
            if err is exc:
                raise
            raise err from exc

    def launch_kernel(self, name: str, grid, block, smem: int, args: tuple, cluster=None) -> None:
        """One `gpu.launch_func`: its geometry, its plan, then the plan's runner."""
        geom = Geometry.of(self.view, name, grid, block, smem, cluster)
        run = LaunchRun(self.view, self.gmem, geom, sanitizer=self.sanitizer, cache_key=self._key(name),
                        limits=self.limits, native=self.native)
        plan = plan_launch(geom, policy=self.policy, batch=self.batch, resident=self.resident,
                           taint=_taint.current() is not None, lockstep_refusal=run.lockstep_refusal)
        rec = run.record = LaunchRecord(name, geom.grid, geom.block, geom.lds_bytes, str(plan.policy),
                                        cluster=geom.cluster, plan=plan)
        if plan.lockstep_refused:
            rec.stats["lockstep_refused"] = plan.lockstep_refused
        if plan.lockstep_batch_refused:
            rec.stats["lockstep_batch_refused"] = plan.lockstep_batch_refused
        native = run.native_program(plan)
        calls, waited = (native.calls(), native.waited) if native else (0, 0)
        t0 = time.perf_counter()
        RUNNERS[plan.strategy](plan, geom, run, args)
        rec.seconds = time.perf_counter() - t0
        if native:
            rec.stats["native"] = native.as_dict(native.calls() - calls, native.waited - waited)
        self.records.append(rec)


class HostCtx:
    """`ctx` of the host launcher: one lane, and the launch entry point."""

    def __init__(self, launcher: Launcher):
        self.L = 1
        self.mask = np.ones(1, dtype=bool)
        self.mask_full = True
        self.launcher = launcher
        self.nops = 0

    def tick(self) -> None:
        pass

    def loop(self, lb, ub, step) -> range:
        # FlyDSL's own host code: short loops over launch arguments, not kernel work
        return range(int(lb), int(ub), int(step))


# Ops with an emitter that refuses them with the reason (the emitter names it at translation).
REFUSED_OPS = ("rocdl.permlane16.swap", "rocdl.permlane32.swap", "rocdl.s.get.barrier.state",
               "rocdl.s.get.named.barrier.state", "arith.scaling_extf", "arith.scaling_truncf")

LAUNCH_FORMS = """\
launch forms: FlyDSL `@flyc.jit` host functions as their authors call them, any grid and
  block (<= 1024 threads, <= 320 KiB LDS incl. dynamic), cluster launches
  (`launch(cluster=(cx, cy, cz))`, <= 16 workgroups, grid a multiple of the cluster; the
  cluster's workgroups run resident together); emulate(batch=N) lockstep batches,
  emulate(resident=N) interleaved workgroups
arguments: torch tensors (default dynamic layout), from_torch_tensor / from_dlpack with static
  or dynamic layouts, from_c_void_p pointers and integer addresses into live CPU tensors,
  scalars of every width, constexprs, @fx.struct values
barriers: gpu.barrier, s_barrier, split workgroup barrier (-1), cluster barrier (-3, in a
  cluster launch); refused: named (1..16) and trap barriers, cluster-barrier isfirst
copies: TDM 2-D load/store (pad, out-of-bounds zero fill; multicast into the cluster peers
  the workgroup mask names, the issuer's bit included), async global<->LDS b8..b128
  (cluster.load.async.to.lds refused)
anything else is an UnsupportedOp naming the op and its Python line: please report it"""


def supported_text(width: int = 96) -> str:
    """What the virtual gfx1250 runs: launch and argument forms, and every op with an emitter
    (`ldssan env` prints it; the README summarizes it)."""
    import textwrap

    from .ops import load_all

    names = sorted(n for n in load_all() if not n.startswith("call:") and n not in REFUSED_OPS)
    by_dialect: dict[str, list[str]] = {}
    for n in names:
        by_dialect.setdefault(n.split(".", 1)[0], []).append(n)
    lines = ["virtual gfx1250 (ldssan.runtime.emu) runs:", LAUNCH_FORMS, f"ops ({len(names)}):"]
    for dialect, ops in by_dialect.items():
        lines += textwrap.wrap(", ".join(ops), width, initial_indent=f"  {dialect}: ", subsequent_indent="    ")
    from .ops.intrinsics import INTRINSICS

    lines += textwrap.wrap(", ".join(sorted(INTRINSICS)), width, initial_indent="  llvm.call_intrinsic of: ",
                           subsequent_indent="    ")
    lines += textwrap.wrap(", ".join(REFUSED_OPS), width, initial_indent="refused, with the reason: ",
                           subsequent_indent="  ")
    return "\n".join(lines)


def parse_module(text: str) -> ModuleView:
    """A `ModuleView` of MLIR text (a dumped stage-10 `.mlir`, or a test's module)."""
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    from ldssan.passes.ir.irview import view_module

    import hashlib

    with _create_mlir_context():
        view = view_module(ir.Module.parse(text))
    view.key = hashlib.sha256(text.encode()).hexdigest()[:20]
    return view


def run_kernel(view: ModuleView, kernel: str, *, grid, block, args: list, policy: Policy | str = "round-robin",
               batch: int = 1, smem: int = 0, sanitizer=None, resident: int = 1, cluster=None,
               time_limit: float | None = None, step_budget: int | None = None, native: str = "auto") -> Launcher:
    """Launch `kernel` of `view` directly. numpy arrays in `args` become global pointers
    (results land in them); other values are passed as they are. `cluster`: cluster dims
    (x, y, z) for a cluster launch; `time_limit` / `step_budget`: as `limits.Limits`."""
    if isinstance(policy, str):
        policy = Policy.parse(policy)
    gmem = GlobalMemory()
    values = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous:
                raise ValueError(f"argument {i}: arrays must be C-contiguous")
            gmem.add(a.ctypes.data, a.nbytes, f"arg{i}")
            values.append(np.int64(a.ctypes.data))
        else:
            values.append(a)
    launcher = Launcher(view, gmem, policy=policy, batch=batch, ir_key=view.key or None, sanitizer=sanitizer,
                        resident=resident, time_limit=time_limit, step_budget=step_budget, native=native)
    launcher.launch_kernel(kernel, grid, block, smem, tuple(values), cluster)
    return launcher

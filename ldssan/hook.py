"""Turning ldssan on for FlyDSL: `FLYDSL_LDSSAN=1`, `ldssan.enable()`, or `with ldssan.sanitize():`.

While on, every FlyDSL kernel that is launched is compiled with the ldssan pass at the
ldssan sentinel (`frontend.sentinel_fragment`: the run's `RunConfig` is in the fragment, so
FlyDSL's cache never serves an instrumented build to a plain run or the reverse), executed on the
virtual gfx1250, and checked; each host call's `LaunchResult` (its `Report`, the kernel
name and the site table) goes to the active `Collector`.

Who checks (FLYDSL_LDSSAN_DEVICE, `engine_for`): the Python engine (`runtime/shadow`), or the
device runtime linked into the kernel (`runtime/device`), run on the virtual gfx1250
(`emulated`) or on a gfx1250 HIP device (`hardware`). Either way the host call's records
reach the collector as the same `SessionOutcome`, decoded the same way.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import replace

from ldssan.passes.instrument import instrument_pass
from ldssan.runtime import arguments
from ldssan.runtime.emu import frontend
from ldssan.runtime.emu.frontend import EmuConfig
from ldssan.runtime.emu.limits import Limits
from ldssan.runtime.emu.launch import batch_option
from ldssan.runtime.emu.memo import Memo
from ldssan.runtime.emu.runconfig import RunConfig
from ldssan.runtime.emu.sched import Policy
from ldssan.runtime.session import ShadowSession

from . import config, scope
from .session import LaunchFault, LaunchResult, decode_outcome, launch_fault


class Collector:
    """The results of sanitized launches, in order (thread-safe); `faults`: the launches that
    raised instead (kept even when the caller catches the error)."""

    def __init__(self) -> None:
        self.results: list[LaunchResult] = []
        self.faults: list[LaunchFault] = []
        self._lock = threading.Lock()

    def add(self, result: LaunchResult) -> None:
        with self._lock:
            self.results.append(result)

    def add_fault(self, fault: LaunchFault) -> None:
        with self._lock:
            self.faults.append(fault)

    def take(self) -> list[LaunchResult]:
        with self._lock:
            out, self.results = self.results, []
        return out

    def take_faults(self) -> list[LaunchFault]:
        with self._lock:
            out, self.faults = self.faults, []
        return out

    @property
    def violations(self):
        """Every error-severity violation (races, bad waits, ...): what makes a launch unclean."""
        return [v for r in self.results for v in r.report.violations if v.severity == "error"]

    @property
    def warnings(self):
        """Warning-severity findings (the static fence-pairing lint under FLYDSL_LDSSAN_LINT=warn)."""
        return [v for r in self.results for v in r.report.violations if v.severity != "error"]


_collector_stack: list[Collector] = [Collector()]


def collector() -> Collector:
    return _collector_stack[-1]


# FLYDSL_LDSSAN_DEVICE -> torch's GPU device choice (ldssan.vdevice.wanted): the device
# runtime on hardware needs torch's own GPU; emulated runs where the Python engine does
_TORCH_DEVICE = {"auto": "auto", "off": "off", "virtual": "virtual", "emulated": "auto", "hardware": "off"}


def engine_for(choice: str) -> str:
    """FLYDSL_LDSSAN_DEVICE=`choice` -> who checks the launches: `python` (the Python engine
    on the virtual gfx1250), `emulated` (the device runtime on the virtual gfx1250) or
    `hardware` (the device runtime on a gfx1250 HIP device). `hardware` without such a
    device is a `HardwareUnavailable` naming the reason; `auto` is `hardware` when there is
    one, else `python`."""
    from ldssan.runtime.device import hardware

    if choice not in _TORCH_DEVICE:
        raise ValueError(f"ldssan: device {choice!r}: expected auto, virtual or off (torch's GPU device), "
                         "or emulated or hardware (the device runtime)")
    if choice in ("off", "virtual", "emulated"):
        return "emulated" if choice == "emulated" else "python"
    reason = hardware.unavailable_reason()
    if choice == "hardware" and reason is not None:
        raise hardware.HardwareUnavailable(f"ldssan: FLYDSL_LDSSAN_DEVICE=hardware: {reason}")
    return "python" if reason is not None else "hardware"


_hardware: list = []  # the HardwareLaunches installed by enable() (FLYDSL_LDSSAN_DEVICE=hardware)


def _make_config(policy, ring: int, batch: int, resident: int = 1, engine: str = "python", limits=None,
                 memo: int | None = None, kernels=None):
    """The EmuConfig of a sanitized run; under `hardware` also the installed HardwareLaunches
    (its caller uninstalls it), else None. `limits`: the run's `Limits`, `memo`: its memo budget
    in bytes (None: the FLYDSL_LDSSAN_* options); `kernels`: the `scope.Scope` checked (None:
    every kernel)."""
    # FlyDSL keeps 5 user frames per location by default: too few to reach the kernel line
    # that called a helper from inside a loop body. Reports want the whole chain.
    os.environ.setdefault("FLYDSL_DEBUG_MAX_LOC_DEPTH", "16")
    frontend.install_locations()
    if isinstance(policy, str):
        policy = Policy.parse(policy)

    scope.refuse_hardware(kernels, engine)
    col = collector()
    add = col.add
    coverage = bool(config.get("coverage"))  # read here, so a bad value fails before any launch
    budget = config.get("memo") if memo is None else memo
    isa = config.get("isa")
    native = config.get("native")
    if isa != "off":
        from .isa import sanitized  # FlyDSL's linker path: loaded only when asked for

        sanitized.install(collector)

    def on_finish(outcome):
        add(decode_outcome(outcome, coverage=coverage))

    def on_fault(exc, entry, sanitizer):
        fault, err = launch_fault(exc, entry, sanitizer)
        col.add_fault(fault)
        return err

    if engine == "emulated":
        from ldssan.runtime.device.session import emulated_config

        cfg = emulated_config(policy, ring=ring, resident=resident, on_finish=on_finish)
        cfg.on_fault, cfg.scope, cfg.run = on_fault, kernels, replace(cfg.run, isa=isa)
        cfg.memo = Memo(budget) if budget else None  # its launches are refused, and counted
        return cfg, None
    if engine == "hardware":
        from ldssan.runtime.device.hardware import HardwareLaunches

        launches = HardwareLaunches(capacity=ring, on_finish=on_finish)
        launches.install()
        launches.config.on_fault, launches.config.run = on_fault, replace(launches.config.run, isa=isa)
        return launches.config, launches
    lim = limits if limits is not None else _limits(None, None)
    run = RunConfig(policy=policy, batch=1 if callable(batch) else batch_option(batch), resident=resident,
                    sanitize=True, time_limit=lim.time_limit, step_budget=lim.step_budget, ring=ring, isa=isa,
                    native=native)
    cfg = EmuConfig(run, on_fault=on_fault, sentinel_pass=instrument_pass, memo=Memo(budget) if budget else None,
                    scope=kernels)

    def factory(sites_json, entry, view):
        if callable(batch):  # per host call, from its IR; the call's Launcher is built after this
            cfg.run = replace(cfg.run, batch=batch(view))
        return ShadowSession(sites_json, entry, view, ring_capacity=ring, on_finish=on_finish)

    cfg.sanitizer_factory = factory
    return cfg, None


def _limits(time_limit, step_budget) -> Limits:
    """The run's limits: each as given, else its FLYDSL_LDSSAN_* option ("auto" by default)."""
    return Limits(config.get("time_limit") if time_limit is None else time_limit,
                  config.get("step_budget") if step_budget is None else step_budget)


def enable(*, policy: "Policy | str | None" = None, ring: int | None = None, batch: "int | str | None" = None,
           device: str | None = None, time_limit: "float | str | None" = None,
           step_budget: "int | str | None" = None, memo: int | None = None, kernels=None) -> EmuConfig:
    """Sanitize every FlyDSL launch of this process (what `FLYDSL_LDSSAN=1` does).
    Every FLYDSL_LDSSAN_* option is validated first (a bad one is a `config.ConfigError`).
    `device` (default FLYDSL_LDSSAN_DEVICE): 'virtual' makes torch's GPU device the virtual
    gfx1250 (`ldssan.vdevice`), 'off' leaves torch alone, 'auto' = virtual when torch has no GPU
    (and the device runtime on a gfx1250 when there is one); 'emulated' and 'hardware' check
    with the device runtime (`engine_for`). `memo`: bytes of post-states kept to replay
    identical launches (docs/memo.md; 0: off). A bad argument is an `arguments.ConfigError`
    naming it (None: the option's environment value). `kernels`: the kernels checked, patterns
    as FLYDSL_LDSSAN_KERNELS (a string or a list; `ldssan.scope`); the others run plain."""
    config.validate()
    memo = None if memo is None else arguments.integer("enable", "memo", memo, 0)
    from . import vdevice

    policy, ring, batch, device = _checked_enable(policy, ring, batch, device)
    kernels = config.get("kernels") if kernels is None else scope.argument("enable", kernels)
    choice = device or config.get("device")
    checker = engine_for(choice)
    use_vdevice = wants_vdevice(choice)
    while _hardware:  # a second enable() replaces the first
        _hardware.pop().uninstall()
    cfg, launches = _make_config(policy or config.get("policy"), ring or config.get("ring"),
                                 config.get("batch") if batch is None else batch, engine=checker,
                                 limits=_limits(time_limit, step_budget), memo=memo, kernels=kernels)
    if launches is not None:
        _hardware.append(launches)
    frontend.set_global(cfg)
    if use_vdevice:
        vdevice.install()
    return cfg


def wants_vdevice(choice: str | None = None) -> bool:
    """Whether FLYDSL_LDSSAN_DEVICE=`choice` (default: the setting) makes torch's GPU device
    the virtual gfx1250 on this host (`ldssan.vdevice.wanted`)."""
    from . import vdevice

    choice = choice or config.get("device")
    if choice not in _TORCH_DEVICE:
        engine_for(choice)  # the named error listing the accepted values
    return vdevice.wanted(_TORCH_DEVICE[choice])


@contextmanager
def torch_device():
    """torch's GPU device inside the block as `FLYDSL_LDSSAN=1 pytest` has it from configure
    on (the virtual gfx1250 on a host with no GPU), for ldssan's own test runners (`rows
    --pytest`, `mutate --pytest`); a virtual device already installed is left as it is."""
    from . import vdevice

    mine = not vdevice.active() and wants_vdevice()
    if mine:
        vdevice.install()
    try:
        yield
    finally:
        if mine:
            vdevice.uninstall()


def disable() -> None:
    """Stop sanitizing, and give torch back its own GPU device if the virtual one stood in."""
    from . import vdevice

    frontend.set_global(None)
    while _hardware:
        _hardware.pop().uninstall()
    vdevice.uninstall()


def engine() -> str | None:
    """Who checks the launches now: python, emulated or hardware (None: ldssan is off)."""
    cfg = frontend.current()
    if cfg is None or not cfg.sanitize:
        return None
    return cfg.run.executor


def enabled() -> bool:
    cfg = frontend.current()
    return cfg is not None and cfg.sanitize


def _checked_enable(policy, ring, batch, device):
    """enable()'s arguments, each None (the environment's value) or checked."""
    return (None if policy is None else arguments.policy("enable", policy, Policy),
            None if ring is None else arguments.integer("enable", "ring", ring, 1, config.RING_MAX),
            None if batch is None else arguments.batch("enable", batch, per_call=True),
            None if device is None else arguments.choice("enable", "device", device, config.DEVICE_CHOICES))


def _checked_sanitize(policy, ring, batch, resident, device):
    """sanitize()'s arguments, checked before the block opens."""
    resident = arguments.integer("sanitize", "resident", resident, 1)
    batch = arguments.batch("sanitize", batch, per_call=True)
    arguments.batch_and_resident("sanitize", batch, resident)
    return (arguments.policy("sanitize", policy, Policy),
            arguments.integer("sanitize", "ring", ring, 1, config.RING_MAX), batch, resident,
            arguments.choice("sanitize", "device", device, config.DEVICE_CHOICES))


def sanitize(policy: "Policy | str" = "lockstep", *, ring: int = 4096, batch: "int | str" = "auto",
             resident: int = 1, device: str = "off", time_limit: "float | str | None" = None,
             step_budget: "int | str | None" = None, memo: int | None = None, kernels=None):
    """Sanitize the FlyDSL launches inside the block; yields the `Collector` of their results.
    The default `lockstep` runs a workgroup's waves, and as many workgroups as fit the lane
    budget (`batch="auto"`), as one lane array (same verdicts, faster; kernels it cannot run
    are run per wave, one workgroup at a time); output checks pass a per-wave policy.
    `batch` may be a function of each host call's `ModuleView` returning that call's batch.
    `device` as FLYDSL_LDSSAN_DEVICE (`engine_for`): the default 'off' is the Python engine;
    'emulated' / 'hardware' check with the device runtime (lockstep then runs per wave).
    `time_limit` (CPU seconds per launch) / `step_budget` (loop iterations per scheduler run):
    None = FLYDSL_LDSSAN_TIME_LIMIT / _STEP_BUDGET ("auto": scaled with the launch).
    `memo`: bytes of post-states kept to replay a launch identical to an earlier one of the
    block (docs/memo.md; 0: off); None = FLYDSL_LDSSAN_MEMO.
    torch's GPU device is left as it is. `kernels` (None: every kernel) as in `enable`.

    The block covers the calling thread's launches (also those inside `emulate()`, which
    then run with its policy and are checked here); a launch from another thread while it
    is open is an `UncoveredThreadLaunch` (`enable()` covers every thread). A launch that
    raises is kept in `faults`; a fault of ldssan's own code is an `LdssanInternalError`.
    A bad argument is an `arguments.ConfigError` naming it, raised by this call."""
    limits = _limits(time_limit, step_budget)  # a bad limit fails here too, before the block opens
    memo = config.get("memo") if memo is None else arguments.integer("sanitize", "memo", memo, 0)
    return _sanitized(*_checked_sanitize(policy, ring, batch, resident, device), limits, memo,
                      scope.argument("sanitize", kernels))


@contextmanager
def _sanitized(policy: Policy, ring: int, batch, resident: int, device: str, limits: Limits, memo: int,
               kernels):
    col = Collector()
    _collector_stack.append(col)
    cfg = launches = None
    try:
        cfg, launches = _make_config(policy, ring, batch, resident, engine=engine_for(device),
                                     limits=limits, memo=memo, kernels=kernels)
        with frontend.active(cfg):
            yield col
    except Exception as exc:
        if cfg is not None and cfg.run.device is not None:
            from ldssan.runtime.device.session import link_failure

            failure = link_failure(exc)  # a link refusal reaches the caller as DeviceLinkError
            if failure is not None:
                raise failure from exc
        raise
    finally:
        if launches is not None:
            launches.uninstall()
        _collector_stack.remove(col)

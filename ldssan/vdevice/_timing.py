"""What torch's timing tools report on the virtual gfx1250.

There is no device clock: an emulated launch runs on the host before its call returns. So
the durations reported here are the emulation's wall time, which says how long ldssan took,
not how fast the kernel is on a gfx1250.

- `torch.profiler` with `ProfilerActivity.CUDA` (or `use_device="cuda"`): every kernel the
  virtual gfx1250 ran inside the profiling window is one CUDA device event (`device_type`
  `DeviceType.CUDA`, device 0) named after the kernel, with the emulator's wall time for that
  launch as its duration: `prof.events()`, `key_averages()`, `self_device_time_total` and
  `device_time_total` report them as they report GPU kernels. A launch the memo replayed
  (docs/memo.md) is a device event too, lasting what its replay took (the call's first
  launch carries it, the others last 0). Host-side torch ops are
  profiled as usual (CPU events). torch's CPU build cannot record CUDA activity in kineto,
  so the events are added when the profiler turns its results into events (the one seam
  torch has); `export_chrome_trace` writes kineto's own buffer and does not show them.
- `torch.cuda.Event(enable_timing=True).elapsed_time(end)`: the host wall time in ms between
  the two `record()` calls: the emulated launches and the host work between them
  (`_cuda.Event`).
"""

from __future__ import annotations

import time

from torch.autograd import DeviceType
from torch.autograd import profiler as _prof
from torch.autograd.profiler_util import FunctionEvent

_windows: list["_Window"] = []  # the profiling windows open now (profilers can nest)
_PROFILE = _prof.profile


class _Window:
    """The kernels the virtual gfx1250 ran while one profiler was recording."""

    def __init__(self, host: bool):
        self.host = host  # the user asked for CPU activity too
        self.start_ns = 0
        self.launches: list[tuple[str, int, int]] = []  # (kernel, start, end) perf_counter ns


def _launch_kernel(orig):
    def launch_kernel(self, name, *args, **kwargs):
        if not _windows:
            return orig(self, name, *args, **kwargs)
        t0 = time.perf_counter_ns()
        out = orig(self, name, *args, **kwargs)
        t1 = time.perf_counter_ns()
        for w in _windows:
            w.launches.append((name, t0, t1))
        return out

    return launch_kernel


def _init(orig):
    def __init__(self, *args, use_device=None, use_cuda=False, use_cpu=True, **kwargs):
        if use_device != "cuda" and not use_cuda:
            orig(self, *args, use_device=use_device, use_cpu=use_cpu, **kwargs)
            return
        # torch's CPU build would fall back to "legacy" CUDA events, one failing C++ call per
        # op; kineto records the host (always: it needs an activity), this module the device
        orig(self, *args, use_device=None, use_cpu=True, **kwargs)
        self.use_device = "cuda"
        self._ldssan_window = _Window(host=use_cpu)

    return __init__


def _start_trace(orig):
    def start_trace(self):
        orig(self)
        window = getattr(self, "_ldssan_window", None)
        if window is not None and window not in _windows:
            window.launches.clear()
            window.start_ns = self.profiling_start_time_ns
            _windows.append(window)

    return start_trace


def _exit(orig):
    def __exit__(self, *exc):
        try:
            return orig(self, *exc)
        finally:
            window = getattr(self, "_ldssan_window", None)
            if window in _windows:
                _windows.remove(window)

    return __exit__


def _device_events(window: _Window, first_id: int) -> list[FunctionEvent]:
    return [FunctionEvent(id=first_id + i, name=name, trace_name=name, thread=0,
                          start_us=(t0 - window.start_ns) / 1000, end_us=(t1 - window.start_ns) / 1000,
                          use_device="cuda", device_type=DeviceType.CUDA, device_index=0,
                          overload_name="", input_shapes=[], stack=[], concrete_inputs=[], kwinputs={})
            for i, (name, t0, t1) in enumerate(window.launches)]


def _parse(orig):
    def parse_kineto_results(self, result, *args, **kwargs):
        events = orig(self, result, *args, **kwargs)
        window = getattr(self, "_ldssan_window", None)
        if window is None:
            return events
        if not window.host:
            events = [e for e in events if e.device_type != DeviceType.CPU]
        first = max((e.id for e in events), default=0) + 1
        return [*events, *_device_events(window, first)]

    return parse_kineto_results


_WRAPS = {"__init__": _init, "_start_trace": _start_trace, "__exit__": _exit, "_parse_kineto_results": _parse}


def _replayed(records, start_ns: int, end_ns: int) -> None:
    """A replayed call's launches, as device events of the open windows: the first spans the
    replay, the others are instants at its end."""
    for i, rec in enumerate(records):
        t0 = start_ns if i == 0 else end_ns
        for w in _windows:
            w.launches.append((rec.kernel, t0, end_ns))


def patches() -> list:
    """The profiler's and the emulator's launch seams (applied by `runtime.seam`)."""
    from ldssan.runtime.emu.launch import Launcher

    return [*((_PROFILE, name, wrap) for name, wrap in _WRAPS.items()), (Launcher, "launch_kernel", _launch_kernel)]


def start() -> None:
    """The device is installed: replayed launches are device events of the open windows."""
    from ldssan.runtime.emu import memo

    memo.add_replay_listener(_replayed)


def reset() -> None:
    """The device is uninstalled: forget the open profiling windows."""
    from ldssan.runtime.emu import memo

    memo.remove_replay_listener(_replayed)
    _windows.clear()

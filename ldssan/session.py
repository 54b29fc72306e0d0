"""One sanitized host call: a happens-before engine per workgroup batch, one record ring,
and at the end the decoded `Report` handed to the collector."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ldssan.runtime.emu.hooks import ShadowHooks
from ldssan.runtime.emu.launch import lds_layout
from ldssan.runtime.records import NO_SITE, Ring
from ldssan.runtime.shadow import ShadowEngine

from .decode import LdsBuffer, Report, SiteTable, decode

_launch_ids = itertools.count()


@dataclass
class LaunchResult:
    kernel: str
    report: Report
    launch: int
    sites: SiteTable
    coverage: dict = field(default_factory=dict)


class SanitizerSession:
    def __init__(self, sites_json: str, entry: str, view, *, ring_capacity: int, on_result):
        self.table = _site_table(sites_json, view)
        self.entry = entry
        self.ring = Ring(ring_capacity)
        self.launch = next(_launch_ids)
        self.on_result = on_result
        self.engines: list = []
        self.kernels: list[str] = []
        self.coverage = view.attrs.get("ldssan.coverage", "{}")

    # -- called by the emulator's Launcher ------------------------------------------------------
    def begin_batch(self, prog, waves, chunk, grid, lds_bytes):
        gx, gy, _gz = grid
        groups = [x + gx * (y + gy * z) for x, y, z in chunk]
        engine = ShadowEngine(lds_bytes, len(waves), self.ring, groups=groups, launch=self.launch)
        self.engines.append(engine)
        if prog.name not in self.kernels:
            self.kernels.append(prog.name)
        for ctx in waves:
            ctx.san = ShadowHooks(engine, ctx)
            ctx.lds_oob_ok = True  # out-of-range LDS is reported as LDS031, not raised
        return lambda ctx: engine.wave_end(ctx.wave, NO_SITE)

    def end_batch(self) -> None:
        """Every engine begun since the last call has run to its end."""
        for engine in self.engines:
            engine.finish()
        self.engines = []

    def finish(self) -> None:
        from . import config

        if config.get("coverage"):
            _print_coverage(self.coverage)
        kernel = ", ".join(self.kernels) or self.entry
        report = decode(self.ring.records(), self.table, dropped=self.ring.dropped,
                        capacity=self.ring.capacity, launches=1, kernel=kernel)
        self.on_result(LaunchResult(kernel, report, self.launch, self.table))


_COVERAGE_SHOWN: set[str] = set()


def _print_coverage(coverage_json: str) -> None:
    """`FLYDSL_LDSSAN_COVERAGE=1`: each kernel build's instrumented sites by kind, once."""
    import sys

    from ldssan.passes.instrument import coverage_line

    for line in coverage_line(coverage_json):
        if line not in _COVERAGE_SHOWN:
            _COVERAGE_SHOWN.add(line)
            print(line, file=sys.stderr)


def _site_table(sites_json: str, view) -> SiteTable:
    import json

    data = json.loads(sites_json)
    offsets, _total = lds_layout(view)
    buffers = []
    for name, off in offsets.items():
        g = view.globals[name]
        frame = g.loc.frame
        where = f" ({frame.file.rsplit('/', 1)[-1]}:{frame.line})" if frame else ""
        from ldssan.runtime.emu.types import byte_size

        buffers.append({"name": f"{name}{where}", "offset": off, "size": byte_size(g.type)})
    data["buffers"] = buffers
    table = SiteTable.from_json(data)
    _ = LdsBuffer  # the table's buffer type
    return table

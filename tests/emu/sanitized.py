"""Run an MLIR kernel text through the whole chain the tests exercise piecewise: the
instrumentation pass, the virtual gfx1250 and the shadow engine, and decode its report."""

from __future__ import annotations

from ldssan.decode import Report
from ldssan.hook import Collector
from ldssan.passes.instrument import Instrumenter
from ldssan.runtime.emu.launch import run_kernel
from ldssan.runtime.session import ShadowSession
from ldssan.session import decode_outcome


def sanitize_mlir(text: str, args: list, *, grid=(1, 1, 1), block=(64, 1, 1), **launch) -> Report:
    """Instrument the module `text`, run its `kern` sanitized with `args` (`launch` goes to
    `run_kernel`: policy, cluster), return the decoded report of the launch."""
    from flydsl._mlir import ir
    from flydsl.compiler.jit_function import _create_mlir_context

    from ldssan.passes.ir.irview import view_module

    with _create_mlir_context():
        mod = ir.Module.parse(text)
        Instrumenter(mod.operation).run()
        view = view_module(mod)
    view.key = str(abs(hash(text)))
    col = Collector()
    session = ShadowSession(view.attrs["ldssan.sites"], "kern", view, ring_capacity=256,
                            on_finish=lambda out: col.add(decode_outcome(out, coverage=False)))
    run_kernel(view, "kern", grid=grid, block=block, args=args, sanitizer=session, **launch)
    session.finish()
    return col.results[0].report

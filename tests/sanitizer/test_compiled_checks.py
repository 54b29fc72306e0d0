"""The shadow's compiled checks (runtime/shadow/compiled.py) on real kernels: a lockstep
launch with native runs checks its LDS accesses' clean cases in C; the GEMM's planted bugs
(TDM writes into the ring, grouped ds reads of it) must come out exactly as with the checks
in numpy (`FLYDSL_LDSSAN_NATIVE=off`), and the C must have done some of the checking.
The random-program comparison with the reference engine is in tests/shadow/test_fastpath.py."""

from __future__ import annotations

import pytest
import torch

from ldssan import hook
from ldssan.kernels import gemm as G
from ldssan.runtime.shadow import compiled as compiled_mod
from ldssan.variants import load_variant
from tests.sanitizer.test_gemm_bugs import BUGS


def _violations(mod, m, n, k, native: str, monkeypatch) -> list:
    monkeypatch.setenv("FLYDSL_LDSSAN_NATIVE", native)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=gen).to(torch.float8_e4m3fn)
    with hook.sanitize("lockstep", memo=0) as col:
        mod.gemm(a, b, waves=4, nb=3)
    return sorted((v.code, v.site.line, v.other_site.line if v.other_site else None, v.count)
                  for v in col.violations)


@pytest.mark.parametrize("name", [None, "tensor_wait_deleted", "kstep_barrier_deleted",
                                  "epilogue_reuse_barrier_deleted"])
def test_gemm_reports_alike_with_the_checks_compiled(name, monkeypatch):
    if name is None:
        mod, (m, n, k) = G, (128, 128, 640)
    else:
        edit, (m, n, k), *_ = BUGS[name]
        mod = load_variant(G, [edit], tag=name)
    calls = []
    for method in ("reads_check", "write"):
        real = getattr(compiled_mod.Kernels, method)
        monkeypatch.setattr(compiled_mod.Kernels, method,
                            lambda self, *a, _real=real: calls.append(_real(self, *a)) or calls[-1])
    on = _violations(mod, m, n, k, "on", monkeypatch)
    assert calls.count(True) > 0, "the compiled checks recorded nothing"
    n_calls = len(calls)
    off = _violations(mod, m, n, k, "off", monkeypatch)
    assert len(calls) == n_calls, "native off must check in numpy"
    assert on == off and (bool(on) == (name is not None)), (on, off)

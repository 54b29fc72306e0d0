"""`protocol_lines` (the AST finder the operators use, as tests and tools see it) and the
case registry through which kernel packages hand their campaign cases to `ldssan mutate`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ldssan.mutate.source import Sync, protocol_lines
from ldssan.mutate.target import cases_of, locate, register_cases, registered

from .kernel_source import RING_KERNEL, line_of


def test_sync_lines_in_program_order_with_their_kind(write_kernel):
    p = protocol_lines(write_kernel())
    syncs = p.syncs("ring_kernel")
    assert [(s.line, s.sync) for s in syncs] == [
        (line_of("fx.gpu.barrier()"), Sync.BARRIER),
        (line_of("fx.rocdl.s_wait_dscnt(0)"), Sync.WAIT),
        (line_of("fx.rocdl.s_barrier_signal(-1)"), Sync.SIGNAL),
        (line_of("fx.rocdl.s_barrier_wait(-1)"), Sync.SPLIT_WAIT),
    ]
    assert all(s.functions == ("ring_kernel",) for s in syncs)


def test_statements_are_found_by_text_only_in_device_code(write_kernel):
    path = write_kernel(RING_KERNEL + "\n\ndef host():\n    fx.gpu.barrier()\n")
    p = protocol_lines(path)
    assert len(p.syncs()) == 4  # the host function's barrier is not device code
    assert p.line("v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)", "ring_kernel") \
        == line_of("v = fx.memref_load(ring, (it % NB) * N + (tid + 32) % N)")
    with pytest.raises(LookupError, match="occurrence 1"):
        p.line("fx.gpu.barrier()", "ring_kernel", nth=1)
    with pytest.raises(LookupError, match="no device function 'host'"):
        p.syncs("host")


def test_named_syncs_refuse_a_count_mismatch(write_kernel):
    p = protocol_lines(write_kernel())
    names = ("publish", "drain", "signal", "wait")
    assert list(p.named_syncs("ring_kernel", names).values()) == [s.line for s in p.syncs("ring_kernel")]
    with pytest.raises(LookupError, match="4 sync statements"):
        p.named_syncs("ring_kernel", names[:3])


def test_registered_cases_are_found_by_module_name_and_by_file():
    import ldssan.kernels  # noqa: F401  (registers the bundled kernels' cases)

    target = locate("ldssan.kernels.rmsnorm")
    by_name = registered(target.module, target.path)
    by_file = registered(None, target.path)
    assert by_name is not None and by_name is by_file
    with pytest.raises(ValueError, match="registered twice"):
        register_cases("ldssan.kernels.rmsnorm", lambda: [])


def test_a_kernel_without_cases_says_how_to_provide_them(write_kernel):
    from ldssan.variants import load_variant

    path = write_kernel(RING_KERNEL.replace("def ldssan_cases", "def _no_cases"), name="no_cases")
    with pytest.raises(LookupError, match="register_cases"):
        cases_of(locate(path), load_variant(path, [], tag="clean"))


def test_the_mutate_package_does_not_import_the_bundled_kernels():
    code = ("import sys, pkgutil, importlib, ldssan.mutate as m\n"
            "for info in pkgutil.iter_modules(m.__path__): importlib.import_module('ldssan.mutate.' + info.name)\n"
            "print(sorted(n for n in sys.modules if n.startswith('ldssan.kernels')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"

"""The hardware suite: the bundled kernels and planted bugs on a real gfx1250, with the device
runtime linked in (`runtime.device.hardware.on_device`), against the virtual gfx1250's
verdicts (the Python engine, `hook.sanitize`) for the same kernel and inputs.

Marked `gfx1250`; skipped on a machine without a gfx1250 HIP device, with the reason. The
comparison is what `benchmarks/device_diff.py` checks on the virtual gfx1250: the grouped
keys (rule, cause, site, other site) are equal and the device's waves are among the
engine's (DESIGN.md, "Differences from the host engine"). A kernel the device runtime does
not link yet fails with its `DeviceLinkError`, not a skip: that is a gap to close.
"""

from __future__ import annotations

import pytest

from ldssan import hook
from ldssan.decode import decode
from ldssan.kernels import gemm as G
from ldssan.kernels import mega_moe as M
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.device import hardware as hw
from ldssan.variants import load_variant
from tests.device import device_diff_module
from tests.hardware import bundled

_REASON = hw.unavailable_reason()
pytestmark = [pytest.mark.gfx1250, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]

device_diff = device_diff_module()

CASES = {
    "rmsnorm_clean": (R, [], bundled.launch_rmsnorm, 1),
    "gemm_clean": (G, [], bundled.launch_gemm, 1),
    "mega_moe_clean": (M, [], bundled.launch_mega_moe, 4),
    **{f"rmsnorm_{name}": (R, edits, bundled.launch_rmsnorm, 1) for name, edits in device_diff.rmsnorm_bugs().items()},
}


def _keys(violations) -> dict:
    return device_diff._keys(violations)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hardware_verdicts_equal_the_virtual_gfx1250s(name):
    import torch

    module, edits, launch, resident = CASES[name]
    # a fresh module per case: its first launch in this process compiles (and links) it
    mod = load_variant(module, edits, tag=f"hw_{name}")
    with hook.sanitize("round-robin", resident=resident) as col:
        launch(mod)
    host = _keys(v for r in col.results for v in r.report.violations)

    with hw.on_device() as run:
        launch(mod, device=f"cuda:{hw.gfx1250_device()}")
    torch.cuda.synchronize()
    ring = run.ring.read()
    dev = _keys(decode(run.records(), run.sites_json(), dropped=ring.dropped, capacity=ring.capacity).violations)

    assert set(dev) == set(host), f"only on hardware {set(dev) - set(host)}, only virtual {set(host) - set(dev)}"
    for key in host:
        assert dev[key]["waves"] <= host[key]["waves"], key
        assert dev[key]["workgroups"] == host[key]["workgroups"], key
    if not edits:
        assert ring.written == 0  # a clean kernel writes no record on the device either


def test_hardware_clean_rmsnorm_output_is_unchanged_by_the_instrumentation():
    """The device runtime only observes: the instrumented kernel's output equals the plain
    kernel's on the same device."""
    import torch

    dev = f"cuda:{hw.gfx1250_device()}"
    mod = load_variant(R, [], tag="hw_rmsnorm_values")
    plain = bundled.launch_rmsnorm(mod, device=dev)
    with hw.on_device():
        checked = bundled.launch_rmsnorm(mod, device=dev)
    torch.cuda.synchronize()
    assert torch.equal(plain.cpu(), checked.cpu())

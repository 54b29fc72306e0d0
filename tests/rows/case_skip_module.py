"""A test module that skips itself at import when torch sees no GPU, the other way GPU suites
gate (`pytest.skip(allow_module_level=True)`); `ldssan rows --pytest` runs it on the virtual
gfx1250 (not collected by the suite: no `test_` file prefix)."""

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("CUDA not available", allow_module_level=True)

from tests.rows import kernels as k  # noqa: E402
from tests.rows.case_gated import launch_on_the_gpu  # noqa: E402


def test_pair_norm_twice():
    # two launches of one kernel, as a benchmarking test makes (each launch has the race)
    torch.testing.assert_close(launch_on_the_gpu(times=2), k.pair_norm_reference())


def test_always_skipped():
    pytest.skip("skipped whatever the device")

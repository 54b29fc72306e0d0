"""A pytest-style test for `ldssan rows --pytest` (not collected by the suite: no `test_`
file prefix). It builds its own inputs and launches the racy `pair_norm` kernel, then checks
its output against the reference, so it fails in the runs where a wide row raced."""

import torch

from tests.rows import kernels as k


def test_pair_norm_launch():
    m = len(k.WIDTHS)
    x = k._x(m)
    w = torch.tensor(k.WIDTHS, dtype=torch.int32)
    y = torch.zeros(m * k.N)
    k._launch_pair(x, w, y, m, True)
    torch.testing.assert_close(y.view(m, k.N), k.pair_norm_reference())


def test_launches_nothing():
    assert k.N == 64

"""pytest-style tests for `ldssan rows --pytest` as a GPU test suite writes them (not collected
by the suite: no `test_` file prefix). The whole module is gated on a GPU, as FlyDSL's own
kernel tests are; the runner must run it on the virtual gfx1250, as `FLYDSL_LDSSAN=1 pytest`
does. The other tests do not run their kernel: skipped, erroring or launching nothing."""

import pytest
import torch

from tests.rows import kernels as k

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def launch_on_the_gpu(times: int = 1) -> torch.Tensor:
    m = len(k.WIDTHS)
    x = k._x(m).to("cuda")
    w = torch.tensor(k.WIDTHS, dtype=torch.int32, device="cuda")
    y = torch.zeros(m * k.N, device="cuda")
    for _ in range(times):
        k._launch_pair(x, w, y, m, True)
    torch.cuda.synchronize()
    return y.view(m, k.N).cpu()


def test_pair_norm_on_the_gpu():
    torch.testing.assert_close(launch_on_the_gpu(), k.pair_norm_reference())


@pytest.mark.skip(reason="not on this GPU")
def test_skipped_by_a_mark():
    test_pair_norm_on_the_gpu()


def test_skipped_while_running():
    pytest.skip("shape not supported")


def test_raises_before_launching():
    raise RuntimeError("no such shape")


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_fixture_errors(broken):
    test_pair_norm_on_the_gpu()


def test_launches_nothing():
    assert torch.cuda.is_available()


def test_pair_norm_compiled():
    # flyc.compile(fn, *args) compiles and launches; the CompiledFunction it returns launches again
    # with the configuration it was compiled under: rows refuses it
    import flydsl.compiler as flyc

    m = len(k.WIDTHS)
    x = k._x(m).to("cuda")
    w = torch.tensor(k.WIDTHS, dtype=torch.int32, device="cuda")
    y = torch.zeros(m * k.N, device="cuda")
    launch = flyc.compile(k._launch_pair, x, w, y, m, True)
    launch(x, w, y, m, True, None)  # positional only, the stream included
    torch.testing.assert_close(y.view(m, k.N).cpu(), k.pair_norm_reference())

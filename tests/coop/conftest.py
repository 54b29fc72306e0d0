"""The coop tests launch with host (CPU) tensors on the virtual gfx1250; keep torch's
default device on the host whatever an earlier test set, as FlyDSL's own coop suite does."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _host_default_device():
    with torch.device("cpu"):
        yield

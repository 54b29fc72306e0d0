"""The virtual GPU installed for one test and removed after it (tests that check what
installing it changes; skipped when the outer session already runs under ldssan)."""

from __future__ import annotations

import pytest

from ldssan import hook, vdevice


@pytest.fixture
def gpu():
    if vdevice.active() or hook.enabled():
        pytest.skip("the outer session runs under ldssan; these tests install and remove it themselves")
    vdevice.install()
    yield
    vdevice.uninstall()

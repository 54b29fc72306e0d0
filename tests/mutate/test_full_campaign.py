"""The full campaign over the bundled kernels (slow: `pytest -m slow tests/mutate`).

The issue's acceptance: every bundled kernel that exists passes its clean baseline, has at
least 12 mutants, and the whole campaign fits in 5 minutes on 2 workers."""

from __future__ import annotations

import pytest

from ldssan.kernels.campaigns import CAMPAIGNS
from ldssan.mutate import CampaignConfig, run_campaign

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def full_campaign():
    return run_campaign(list(CAMPAIGNS), CampaignConfig(launches=8, jobs=2, timeout=120))


def test_full_campaign_fits_the_budget(full_campaign):
    assert full_campaign.seconds < 300, full_campaign.seconds


@pytest.mark.parametrize("module", list(CAMPAIGNS))
def test_each_bundled_kernel(full_campaign, module):
    k = next(k for k in full_campaign.kernels if k.kernel == module)
    if k.status == "skipped":
        pytest.skip(k.message)
    assert k.status == "ran", k.message
    assert len(k.mutants) >= 12
    assert all(m.status not in ("pending", "not-run", "timeout") for m in k.mutants), \
        [(m.id, m.status) for m in k.mutants]
    s = k.summary()
    assert s["counted"] >= 12 - s["equivalent"] - s["not_compiled"] - s["hang"] - s["crashed"]
    # the sanitizer reports something on at least one mutant (a campaign that kills nothing is broken)
    assert s["killed_by_sanitizer"]["k"] >= 1

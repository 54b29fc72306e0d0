"""Schedule-policy sweeps that fit in CI.

"A clean kernel reports nothing under every scheduler policy" is checked by the full
(case x policy) product, which costs minutes for the big kernels. The default run keeps, for
each case, the `canonical` policy plus one other that rotates with the case's index, so every
policy still runs in CI on some case and every case runs under two schedules; the rest of the
product carries the `slow` marker (`pytest -m slow` runs it).
"""

from __future__ import annotations

import pytest

from ldssan.runtime.emu import ALL_POLICIES

POLICIES = [str(p) for p in ALL_POLICIES]
_ROTATING = [p for p in POLICIES if p != "canonical"]


def default_policies(index: int) -> set[str]:
    """The policies case number `index` runs under in the default (non-slow) run."""
    return {"canonical", _ROTATING[index % len(_ROTATING)]}


def case_policy_params(cases) -> list:
    """pytest params (case, policy) over the whole product, the non-default pairs marked slow."""
    params = []
    for i, case in enumerate(cases):
        keep = default_policies(i)
        for policy in POLICIES:
            marks = () if policy in keep else (pytest.mark.slow,)
            params.append(pytest.param(case, policy, marks=marks, id=f"{case}-{policy}"))
    return params

"""Barrier phases of workgroup barrier -1 (MODEL.md §3 steps 8-10).

Phase k completes when every live wave signalled it (exited waves drop out); then
`acc[k]` = `acc[k-1]` with the row of each wave that signalled k raised to what it had
completed at that signal. Waves that signalled one phase from different sites are LDS020.

`Phases` is a part of `ShadowEngine` (engine.py); it uses the engine's `_waves`, `_acc`,
`_zero`, `_queues`, `_barrier_pairs`, `groups`, `launch`, `n_waves`.
"""

from __future__ import annotations

import numpy as np

from ..records import NO_LANE, Cause, Record, Rule
from .ordering import Records

U32 = 0xFFFFFFFF


class Phases:
    """Completing barrier phases for `ShadowEngine`."""

    def _advance_phases(self) -> None:
        """Complete every phase all live waves have signalled (exited waves dropped out)."""
        while True:
            k = len(self._acc)
            any_live = False
            for w in self._waves:
                if w.live:
                    if w.nsig <= k:
                        return
                    any_live = True
            if not any_live:
                return
            acc = (self._acc[k - 1] if k else self._zero).copy()
            signalled = []
            for w in self._waves:
                if w.nsig > k:
                    np.maximum(acc[w.index], w.sig_snaps[k].done, out=acc[w.index])
                    signalled.append((w.index, w.sig_sites[k]))
            self._acc.append(acc)
            self._check_phase_sites(k, signalled)

    def _check_phase_sites(self, k: int, signalled: list) -> None:
        """LDS020 when waves signalled phase k from different barrier sites (once per pair)."""
        ref_wave, ref_site = signalled[0]
        recs = []
        for wv, site in signalled[1:]:
            if site != ref_site and (site, ref_site) not in self._barrier_pairs:
                self._barrier_pairs.add((site, ref_site))
                recs += [Record(int(Rule.BARRIER_DIVERGENCE), int(Cause.BARRIER_MISMATCH), site & U32,
                                ref_site & U32, 0, wv, ref_wave, NO_LANE, NO_LANE, 0, wg, self.launch)
                         for wg in self.groups]
        if recs:
            self._queues[self.n_waves].append(Records(2 * k, k, recs))

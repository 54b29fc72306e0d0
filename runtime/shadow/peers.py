"""Cross-workgroup LDS checking inside a cluster: TDM multicast into a peer's LDS (LDS014).

Each workgroup's `ShadowEngine` checks its own waves. A TDM load whose workgroup mask names
cluster peers also writes each peer's LDS; this checker, one per cluster, orders those
peer writes against the peer's own accesses by the rule of docs/memory-model.md ("TDM
multicast in a cluster"):

- a copy `d` (wave v of workgroup i, v's n-th TENSORcnt op) is *published at cluster phase
  k* when v's completion of it happens before i's `s_barrier_signal -3` of phase k: the
  signalling wave is v and its tensor wait covered `d` before the signal, or v covered `d`
  before its own `s_barrier_signal -1` of a workgroup phase the signalling wave had returned
  from (its wait) before signalling;
- `d` happens before access `a` of wave u of peer j when `d` is published at some phase
  k and u itself returned from its (k+1)-th `s_barrier_wait -3` before `a`;
- `a` happens before `d` when `a` was before j's signal of some phase k (same wave, or
  through a workgroup phase as above) and v returned from its (k+1)-th wait before
  issuing `d`;
- anything else is LDS014, with the access as the record's site and the copy as the other.

**Merged requests.** When the receiving workgroup j issues the same multicast itself (same
global address, workgroup mask and LDS bytes: every workgroup sharing a tile loads it, as
FlyDSL's and aiter's cluster GEMMs and IREE Wave's multicast pass do), the requests are one
merged request. With the descriptor's early-timeout bit clear (the default), it is a
rendezvous: the tile moves once every named workgroup has issued its load, and each one's own
TENSORcnt covers its own LDS, so `d` reaches j exactly as j's own request `m` (same key, same
occurrence) does, and j's engine checks `m` against j's accesses: the pair is ordered here.
With the bit set, the data returns to the requesters present and latecomers re-broadcast, so
`d` and `a` are ordered when `a` is before `m`'s issue in j (same wave earlier, or through a
workgroup barrier phase: `d` reaches j no earlier than j's request), or when `a` is a read
after `m` completed in j (the wave's own tensor wait, or a workgroup phase after it) with no
newer own copy into those bytes completed before `a` (a late re-send writes identical bytes).
A write of j after `m`, or a read of a newer tile, still needs the cluster rule: a late
peer's re-send must not land on newer data.

Only the waves' own `-3` waits count (a wave that learns of a cluster phase only through a
workgroup barrier after another wave's wait is not credited: conservative). Nothing here
depends on the schedule: every event keeps its wave's counts at issue, and the pairs are
checked once every workgroup of the cluster has ended (`finish`), so the records are the
same under every policy. Accesses are kept until then (cluster launches only).

Not checked here: a peer copy against the receiving workgroup's own copies into the same
bytes (FlyDSL's cluster GEMMs have every workgroup of a row issue the same multicast tile,
so those writes coincide by design), and the completion of the accesses themselves (a ds
load before a barrier counts as done, as the workgroup barrier's release fence makes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..records import NO_LANE, Cause, Record, Rule


@dataclass
class _Wave:
    tseq: int = 0  # TENSORcnt ops issued
    tdone: int = 0  # every tensor op with seq <= tdone is complete (by s_wait_tensorcnt)
    sig1: list = field(default_factory=list)  # tdone at each s_barrier_signal -1
    nwait1: int = 0  # s_barrier_wait -1 returned
    ncs: int = 0  # s_barrier_signal -3 made by this wave
    ncw: int = 0  # s_barrier_wait -3 returned


@dataclass(frozen=True)
class _Event:
    """An access or a copy issue, with its wave's counts at issue."""

    wave: int
    site: int
    nsig1: int
    ncs: int
    ncw: int
    tseq: int = 0  # the wave's TENSORcnt ops issued by this event (a copy: itself included)
    nwait1: int = 0  # workgroup barrier waits the wave returned from
    tdone: int = 0  # the wave's tensor ops complete (by its waits) at this event
    seq: int = 0  # a copy: its TENSORcnt sequence number
    bytes: np.ndarray | None = None  # LDS byte offsets (an access: lane-major)
    lanes: np.ndarray | None = None  # lane of each byte (an access); None: wave-level op
    write: bool = False  # an access that writes LDS
    key: tuple | None = None  # a multicast load: (its descriptor, early-timeout bit, occurrence)


@dataclass
class _Group:
    gid: int  # linear workgroup id in the grid
    waves: dict = field(default_factory=dict)
    # per cluster phase this workgroup signalled: (wave, its nwait1, its tdone, its ncs before)
    csig: list = field(default_factory=list)
    incoming: list = field(default_factory=list)  # (issuer flat id, copy _Event) into this LDS
    own: list = field(default_factory=list)  # this workgroup's TDM loads into its own LDS (_Event)
    issued: dict = field(default_factory=dict)  # (wave, tile) -> multicast loads of it issued so far
    accesses: list = field(default_factory=list)  # _Event: reads and writes alike (both race a copy)

    def wave(self, w: int) -> _Wave:
        s = self.waves.get(w)
        if s is None:
            s = self.waves[w] = _Wave()
        return s


class ClusterChecker:
    """LDS014 for one cluster (module docstring). Workgroups by flat id within the cluster."""

    def __init__(self, groups: dict[int, int], ring, launch: int):
        self.groups = {i: _Group(gid) for i, gid in groups.items()}
        self.ring = ring
        self.launch = launch
        self._done = False

    def _event(self, g: int, w: int, site: int, **kw) -> _Event:
        s = self.groups[g].wave(w)
        return _Event(w, int(site), len(s.sig1), s.ncs, s.ncw, s.tseq, s.nwait1, s.tdone, **kw)

    # -- events, in each wave's program order ----------------------------------------------
    def tensor_op(self, g: int, w: int, site: int, targets: dict[int, np.ndarray], *,
                  own: np.ndarray | None = None, tile=None, early: bool = False) -> None:
        """A TDM op of wave w of workgroup g (it counts on TENSORcnt); `targets`: the peers
        its multicast writes, with the LDS bytes of the tile; `own`: the bytes a load writes
        in g's own LDS; `tile`: what identifies a multicast load (hashable: its descriptor,
        which fixes global address, mask and LDS bytes), `early`: its early-timeout bit."""
        grp = self.groups[g]
        s = grp.wave(w)
        s.tseq += 1
        key = None
        if own is not None:
            offsets = np.asarray(own, np.int64)
            if tile is not None:
                n = grp.issued.get((w, tile), 0)
                grp.issued[(w, tile)] = n + 1
                key = (tile, bool(early), n)
            grp.own.append(self._event(g, w, site, seq=s.tseq, bytes=offsets, key=key))
        for peer, offsets in targets.items():
            ev = self._event(g, w, site, seq=s.tseq, bytes=np.asarray(offsets, np.int64), key=key)
            self.groups[peer].incoming.append((g, ev))

    def tensor_wait(self, g: int, w: int, n: int) -> None:
        s = self.groups[g].wave(w)
        s.tdone = max(s.tdone, s.tseq - n)

    def access(self, g: int, w: int, site: int, offsets: np.ndarray, lanes, *, write: bool = False) -> None:
        """An LDS access (read or write: either races a copy's writes) of wave w of workgroup
        g: byte offsets and their lanes (None: a wave-level op)."""
        self.groups[g].accesses.append(self._event(g, w, site, bytes=np.asarray(offsets, np.int64), lanes=lanes,
                                                   write=write))

    def signal(self, g: int, w: int, bid: int) -> None:
        grp = self.groups[g]
        s = grp.wave(w)
        if bid == -1:
            s.sig1.append(s.tdone)
        elif bid == -3:
            grp.csig.append((w, s.nwait1, s.tdone, s.ncs))
            s.ncs += 1

    def wait(self, g: int, w: int, bid: int) -> None:
        s = self.groups[g].wave(w)
        if bid == -1:
            s.nwait1 += 1
        elif bid == -3:
            s.ncw += 1

    # -- the check ---------------------------------------------------------------------------
    def _before_signal(self, g: int, ev: _Event, k: int) -> bool:
        """Event `ev` of workgroup g happens before g's cluster signal of phase k."""
        csig = self.groups[g].csig
        if k >= len(csig):
            return False
        w0, nwait1, _tdone, ncs = csig[k]
        return (ev.wave == w0 and ev.ncs <= ncs) or ev.nsig1 < nwait1

    def _published(self, g: int, d: _Event, k: int) -> bool:
        """Copy `d` of workgroup g was complete before g's cluster signal of phase k."""
        csig = self.groups[g].csig
        if k >= len(csig):
            return False
        w0, nwait1, tdone, _ncs = csig[k]
        if d.wave == w0 and tdone >= d.seq:
            return True
        sig1 = self.groups[g].wave(d.wave).sig1
        p = min(nwait1, len(sig1)) - 1
        return p >= 0 and sig1[p] >= d.seq

    def finish(self) -> None:
        """Check every (peer copy, access) pair over common bytes; push the records."""
        if self._done:
            return
        self._done = True
        for j, grp in self.groups.items():
            if grp.incoming and grp.accesses:
                self._check_group(j, grp)
        for grp in self.groups.values():
            grp.accesses.clear()
            grp.incoming.clear()
            grp.own.clear()

    def _check_group(self, j: int, grp: _Group) -> None:
        # each wave's events are in its program order; sorting (stably) by issuer and wave
        # makes the records' order and first bytes independent of the interleaving
        incoming = sorted(((i, d) for i, d in grp.incoming if d.bytes.size), key=lambda x: (x[0], x[1].wave))
        if not incoming:
            return
        lo = np.array([int(d.bytes.min()) for _i, d in incoming])
        hi = np.array([int(d.bytes.max()) for _i, d in incoming])
        covered = np.zeros(int(hi.max()) + 1, bool)
        for _i, d in incoming:
            covered[d.bytes] = True
        seen = set()
        verdicts: dict = {}  # (copy, wave, its counts): accesses between two sync ops share it
        for a in sorted(grp.accesses, key=lambda x: x.wave):
            b = a.bytes
            inside = (b >= 0) & (b < covered.size)
            if not b.size or not covered[b[inside]].any():
                continue
            # the copies whose byte range meets the access's; the ordering test (cheap) first,
            # the exact common bytes only for an unordered pair
            for n in np.flatnonzero((lo <= b.max()) & (hi >= b.min())).tolist():
                i, d = incoming[n]
                key = (n, a.wave, a.nsig1, a.ncs, a.ncw, a.nwait1, a.tseq, a.tdone, a.write)
                cause = verdicts.get(key, verdicts)
                if cause is verdicts:
                    cause = verdicts[key] = self._unordered(i, d, j, a)
                if cause is None:
                    continue
                hit = np.flatnonzero(inside & np.isin(b, d.bytes))
                if not hit.size:
                    continue
                first = int(hit[0])
                lane = NO_LANE if a.lanes is None else int(a.lanes[first])
                rec = Record(int(Rule.CLUSTER_COPY_UNORDERED), int(cause), a.site, d.site, int(b[first]),
                             a.wave, d.wave, lane, NO_LANE, i, grp.gid, self.launch)
                key = (rec.cause, rec.site, rec.other_site, rec.wave, rec.other_wave, rec.extra)
                if key not in seen:
                    seen.add(key)
                    self.ring.push(rec)

    # -- merged requests (module docstring) -------------------------------------------------
    def _complete_before(self, j: int, m: _Event, a: _Event) -> bool:
        """j's own copy m was complete, for a's wave, before access a (both of workgroup j)."""
        if a.wave == m.wave:
            return a.tdone >= m.seq
        sig1 = self.groups[j].wave(m.wave).sig1
        p = min(a.nwait1, len(sig1)) - 1
        return p >= 0 and sig1[p] >= m.seq

    @staticmethod
    def _issued_before(x: _Event, y: _Event) -> bool:
        """Event x of a workgroup is ordered before the issue of its copy y."""
        return x.tseq < y.seq if x.wave == y.wave else x.nsig1 < y.nwait1

    def _merged(self, j: int, d: _Event, a: _Event) -> bool:
        """d and a are ordered through j's own matching request (module docstring)."""
        if d.key is None:
            return False
        own = self.groups[j].own
        rendezvous = not d.key[1]
        for m in own:
            if m.key != d.key:
                continue
            if rendezvous or self._issued_before(a, m):
                return True
            if a.write or not self._complete_before(j, m, a):
                continue
            # a newer own copy into the tile's bytes, complete before a: a may read newer data
            newer = (m2 for m2 in own if m2 is not m and self._issued_before(m, m2) and self._complete_before(j, m2, a)
                     and np.isin(m2.bytes, m.bytes).any())
            if next(newer, None) is None:
                return True
        return False

    def _unordered(self, i: int, d: _Event, j: int, a: _Event) -> Cause | None:
        """None when copy `d` of workgroup i and access `a` of workgroup j are ordered
        (either way), else the cause of the record."""
        # newest phase first: the one that orders them, in the common case
        if any(self._published(i, d, k) for k in reversed(range(a.ncw))):
            return None
        if any(self._before_signal(j, a, k) for k in reversed(range(d.ncw))):
            return None
        if self._merged(j, d, a):
            return None
        if any(self._before_signal(i, d, k) for k in range(a.ncw)):
            return Cause.COPY_NOT_WAITED  # a cluster phase separated them; the copy was not complete
        if d.ncw > a.ncw:
            return Cause.PEER_COPY_AFTER_ACCESS
        return Cause.NO_BARRIER

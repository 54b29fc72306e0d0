"""The device runtime's edges: what it refuses to link (by name and line), its record buffer
(ring header, overflow counted, validated read-back), LDS030 retraction, and cache keys that
keep device, sanitized and plain builds apart."""

from __future__ import annotations

import json
from dataclasses import replace

import torch

import pytest

from ldssan import hook
from ldssan.decode import decode
from ldssan.kernels import gemm as G
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.device import DeviceLinkError, ShadowLayout, emulated, record_buffer, settle
from ldssan.runtime.device import layout as L
from ldssan.runtime.records import NO_SITE, Cause, Record, Ring, Rule
from ldssan.variants import Edit, load_variant


def _no_barrier_2():
    line = [i + 1 for i, ln in enumerate(open(R.__file__).read().splitlines()) if ln.strip() == "fx.gpu.barrier()"][1]
    return load_variant(R, [Edit(line, None)], tag="device_ring")


def _gemm_inputs(k=256):
    return torch.randn(64, k).to(torch.float8_e4m3fn), torch.randn(64, k).to(torch.float8_e4m3fn)


def test_a_kernel_with_an_asyncmark_is_refused_naming_it_and_its_line():
    wait = _line(G, "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)")
    mod = load_variant(G, [Edit(wait, "fx.rocdl.asyncmark()")], tag="device_mark")
    with pytest.raises(DeviceLinkError, match=r"@__ldssan_mark at site \d+ \(rocdl\.asyncmark at "
                                              r".*gemm.*\.py:\d+\): asyncmark and wait\.asyncmark"):
        with emulated():
            mod.gemm(*_gemm_inputs(), waves=4, nb=3)


# A GEMM through the device runtime costs over a minute on 2 cores: the default run keeps one
# (test_device_diff DEFAULT_GEMM: TDM copies, waits, the shadow in global scratch); these two
# run with `-m slow`.
@pytest.mark.slow
def test_a_gemm_links_with_its_shadow_in_global_scratch_sized_at_launch():
    """GEMM's LDS is one dynamic arena: the shadow goes to a scratch slot per workgroup,
    sized for the launch's LDS (the descriptor the host writes before the launch)."""
    with emulated() as run:
        G.gemm(*_gemm_inputs(), waves=4, nb=3)
    assert run.records() == []
    (launch,) = run.config.launches
    desc = L.DESC.unpack(record_buffer().whole[: L.DESC_BYTES].numpy().tobytes())
    slots, gx, gy, lds, words, n = desc
    assert (gx, gy, n) == (1, 1, 1) and lds == launch.lds_bytes > 0
    lay = ShadowLayout(waves=4, sites=len(json.loads(run.launches[0][1])["sites"]), lds_bytes=0, copies=True,
                       scratch=True)
    assert words == lay.words_for(lds)
    assert words >= lay.granule_base + (lds // 4) * 5 * 4  # every granule: a writer + 4 readers


def _line(module, text):
    return next(i + 1 for i, ln in enumerate(open(module.__file__).read().splitlines()) if ln.strip() == text)


@pytest.mark.slow
def test_a_copy_never_waited_is_lds013_at_the_wave_end():
    """The scale copies' wait deleted and the epilogue's barrier with it: each wave ends with
    its async copies outstanding -- the device names them at its end, as the engine does."""
    wait = _line(G, "fx.rocdl.s_wait_asynccnt(ASYNC_OUTSTANDING)")
    mod = load_variant(G, [Edit(wait, None)], tag="device_lds013")
    a, b = _gemm_inputs()
    with hook.sanitize() as col:
        mod.gemm(a, b, waves=4, nb=3)
    host = {(v.code, int(v.cause), v.site.id, frozenset(v.waves)) for v in col.violations if v.code == "LDS013"}
    with emulated() as run:
        mod.gemm(a, b, waves=4, nb=3)
    (launch, sites), = run.launches
    found = decode(run.records(), sites).violations
    dev = {(v.code, int(v.cause), v.site.id, frozenset(v.waves)) for v in found if v.code == "LDS013"}
    assert host and dev == host

def test_a_full_buffer_counts_what_it_dropped_and_reads_back_validated():
    mod = _no_barrier_2()
    x, g = torch.randn(2, 512), torch.randn(512)
    with emulated(capacity=5) as run:
        mod.rmsnorm(x, g)
    ring = run.ring()
    assert ring.capacity == 5 and len(ring) == 5
    assert ring.written > 5 and ring.dropped == ring.written - 5
    again = Ring.from_bytes(ring.to_bytes())  # the header and body agree
    assert again.records() == ring.records()
    assert {r.rule for r in ring.records()} <= {Rule.RAW_UNPUBLISHED, Rule.UNINIT_READ}


def test_the_engine_still_runs_after_a_device_build_of_the_same_kernel():
    mod = _no_barrier_2()
    x, g = torch.randn(2, 512), torch.randn(512)
    with emulated() as run:
        mod.rmsnorm(x, g)
    assert run.records()
    with hook.sanitize() as col:
        mod.rmsnorm(x, g)
    assert len(col.results) == 1 and [v.code for v in col.violations] == ["LDS001"]
    with emulated() as run:  # and a device build after a sanitized one is the device build
        mod.rmsnorm(x, g)
    assert run.records()


def _rec(rule, site, wave, offset, other=NO_SITE, other_wave=0xFFFF, cause=0, extra=0, lane=0, other_lane=0):
    return Record(int(rule), int(cause), site, other, offset, wave, other_wave, lane, other_lane, extra, 0, 1)


def test_settle_withdraws_the_uninit_reads_a_write_raced_and_their_repeats():
    raced = _rec(Rule.UNINIT_READ, 4, 1, 0, extra=7)
    again = _rec(Rule.UNINIT_READ, 4, 1, 0, extra=3)  # an earlier execution of that read (a poll)
    kept = _rec(Rule.UNINIT_READ, 4, 2, 0, extra=7)  # no write raced wave 2's read
    race = _rec(Rule.RAW_UNPUBLISHED, 4, 1, 0, other=3, other_wave=0)
    retract = _rec(L.R_RETRACT, 4, 1, 0, other_wave=1, extra=7)
    got = settle([raced, again, kept, race, retract])
    assert got == [replace(kept, extra=0), race]


def test_settle_names_a_copy_completed_in_its_half_phase_lds001():
    flags = L.CAUSE_PENDING | 2 << L.CAUSE_CTR_SHIFT  # a TDM copy
    pending = _rec(Rule.DMA_READ_BEFORE_WAIT, 15, 0, 64, other=0, other_wave=1, cause=flags | Cause.NO_BARRIER,
                   extra=5)
    other = replace(pending, extra=9)  # copy 9 was not completed in its half-phase
    close = _rec(L.R_SEG_CLOSE, 3, 1, 0, other=6, cause=2)  # wave 1's tensor copies 4..6
    async_close = _rec(L.R_SEG_CLOSE, 8, 1, 0, other=9, cause=1)  # another counter's copies
    got = settle([pending, other, close, async_close])
    assert got == [replace(pending, rule=int(Rule.RAW_UNPUBLISHED), cause=int(Cause.COPY_WAITED_UNPUBLISHED),
                           extra=0),
                   replace(other, cause=int(Cause.NO_BARRIER), extra=0)]


def test_settle_names_a_copy_completed_by_its_waves_next_signal_waited_not_published():
    flags = L.CAUSE_LATER | 1 << L.CAUSE_CTR_SHIFT  # an async copy, seq 5, of wave 2
    rec = _rec(Rule.DMA_READ_BEFORE_WAIT, 66, 0, 8, other=6, other_wave=2, cause=flags | Cause.COPY_NOT_WAITED,
               extra=5)
    window = _rec(L.R_SEG_CLOSE, 0, 2, 0, other=9, cause=1, lane=0)  # a returned wait: not "next signal"
    early = _rec(L.R_SEG_CLOSE, 0, 2, 0, other=9, cause=1, lane=1)  # before the record: not "later"
    low = _rec(L.R_SEG_CLOSE, 0, 2, 0, other=4, cause=1, lane=1)  # the next signal, copy 5 not done
    high = replace(low, other_site=5)
    plain = replace(rec, cause=int(Cause.COPY_NOT_WAITED), extra=0)
    assert settle([early, rec, window, high]) == [replace(plain, cause=int(Cause.COPY_WAITED_NOT_PUBLISHED))]
    assert settle([early, rec, window, low, high]) == [plain]
    assert settle([rec]) == [plain]


def test_settle_turns_a_consumed_same_phase_pair_into_the_war_at_the_write():
    raw = _rec(Rule.RAW_UNPUBLISHED, 48, 2, 16, other=68, other_wave=0, cause=L.CAUSE_6A | Cause.NO_BARRIER,
               extra=11, lane=3, other_lane=4)
    unconsumed = replace(raw, extra=12)
    consumed = _rec(L.R_CONSUMED, NO_SITE, 1, 16, other=68, other_wave=0, extra=11)
    got = settle([raw, unconsumed, consumed])
    war = Record(int(Rule.WAR_REUSE), int(Cause.NO_BARRIER), 68, 48, 16, 0, 2, 4, 3, 0, 0, 1)
    assert got == [war, replace(unconsumed, cause=int(Cause.NO_BARRIER), extra=0)]


def test_shadow_size_follows_the_formula():
    lay = ShadowLayout(waves=8, sites=6, lds_bytes=48)
    assert lay.words == 8 * 16 + 4 * 2 + 8 * 6 + 12 * 10 * 4
    assert lay.bytes == 4 * lay.words
    copies = ShadowLayout(waves=4, sites=70, lds_bytes=0, copies=True, scratch=True)
    assert copies.words_for(100) == -(-(4 * L.COPY_WAVE_WORDS + 4 * 2 + 4 * 70 + 25 * 6 * 4) // 4) * 4

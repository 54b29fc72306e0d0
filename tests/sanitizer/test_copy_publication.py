"""End to end (instrumentation pass, virtual gfx1250, engine, decoded report) on small MLIR
kernels with TDM and async copies: a copy its issuing wave waited for, read by another
wave with no barrier after that wait, is LDS001 with the publication cause and the barrier
fix; reads that precede the covering wait stay LDS010 / LDS011 (with the count that would
have sufficed). Each buggy kernel has a fixed twin that is clean, and every verdict is the
same under every scheduler policy of the virtual gfx1250 (ALL_POLICIES)."""

from __future__ import annotations

import pytest

from ldssan.runtime.emu import ALL_POLICIES

from ..emu.test_copies_wmma import ASYNC_KERNEL, tdm_desc
from ..emu.test_ops import module
from .test_copies_e2e import PARAMS, sanitize_text

PUBLISH_CAUSE = "copy completed by its wave's wait, never published to this wave"
TDM_OP = "rocdl.tensor.load.to.lds"
ASYNC_OP = "rocdl.global.load.async.to.lds.b32"
TILE_BYTES = 256  # one 8x8 tile of i32, no padding: every byte of it is written


# Descriptor of an 8x8 i32 tile (tdm.py's field table): 4-byte elements, no padding.
_TDM_HEAD = tdm_desc(tdim0=8, tdim1=8, tile0=8, tile1=8, stride=8) + f"""
      %c32 = arith.constant 32 : i32
      %c63 = arith.constant 63 : i32
      %wave0 = arith.cmpi slt, %t, %c32 : i32
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %a0 = arith.constant 0 : i32
      %g0_0 = vector.from_elements %c1, %a0, %lo, %hi : vector<4xi32>
      %a1 = arith.constant {TILE_BYTES} : i32
      %g0_1 = vector.from_elements %c1, %a1, %lo, %hi : vector<4xi32>"""


def _tdm(i: int) -> str:
    return f"      rocdl.tensor.load.to.lds %g0_{i}, %g1, %z4, %z4, %z8, 0 : vector<4xi32>, vector<8xi32>"


def _read(name: str, word: str) -> str:
    """Lane t loads i32 word `word` of LDS and stores it to out[t]."""
    return f"""
      %q{name} = llvm.getelementptr %base[{word}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %r{name} = llvm.load %q{name} : !llvm.ptr<3> -> i32
      %p{name} = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
      llvm.store %r{name}, %p{name} : i32, !llvm.ptr<1>"""


# Lane t reads word 63 - t: wave 1 reads the words of the tile's first half, which wave 0's
# copy wrote.
_MIRROR = "      %j = arith.subi %c63, %t : i32" + _read("m", "%j")
# The same, in the second tile (words 64..127).
_MIRROR_TILE1 = """
      %c127 = arith.constant 127 : i32
      %j1 = arith.subi %c127, %t : i32""" + _read("m1", "%j1")


def tdm_kernel(body: str) -> str:
    return module(_TDM_HEAD + body, PARAMS, 2 * TILE_BYTES)


def _in_wave0(*lines: str) -> str:
    return "      scf.if %wave0 {\n" + "\n".join(lines) + "\n      }"


KERNELS = {
    # (a) wave 0 loads the tile and waits; both waves read it, with no barrier after the wait
    "tdm_waited_unpublished": tdm_kernel("\n".join([_in_wave0(_tdm(0)), "      rocdl.s.wait.tensorcnt 0",
                                                    _MIRROR])),
    "tdm_waited_published": tdm_kernel("\n".join([_in_wave0(_tdm(0)), "      rocdl.s.wait.tensorcnt 0",
                                                  "      gpu.barrier", _MIRROR])),
    # (b) each lane copies its word with an async copy and waits; reads its mirror word
    "async_waited_unpublished": module(ASYNC_KERNEL.replace("      gpu.barrier\n", ""), PARAMS, 512),
    "async_waited_published": module(ASYNC_KERNEL, PARAMS, 512),
    # (c) the issuing wave reads its own copy before the covering wait
    "tdm_read_before_own_wait": tdm_kernel(_in_wave0(_tdm(0), _read("o", "%t"), "        rocdl.s.wait.tensorcnt 0")),
    "tdm_read_after_own_wait": tdm_kernel(_in_wave0(_tdm(0), "        rocdl.s.wait.tensorcnt 0", _read("o", "%t"))),
    # (d) two tiles, a wait before the barrier that leaves the second in flight (0 suffices);
    # the covering wait comes at the end, after the reads
    "tdm_wait_too_weak": tdm_kernel("\n".join([_in_wave0(_tdm(0), _tdm(1)), "      rocdl.s.wait.tensorcnt 1",
                                               "      gpu.barrier", _MIRROR_TILE1,
                                               "      rocdl.s.wait.tensorcnt 0"])),
    "tdm_wait_strong_enough": tdm_kernel("\n".join([_in_wave0(_tdm(0), _tdm(1)), "      rocdl.s.wait.tensorcnt 0",
                                                    "      gpu.barrier", _MIRROR_TILE1])),
}

# name: (code, cause line, this access's text, other access's text, words the fix hint must name)
BUGS = {
    "tdm_waited_unpublished": ("LDS001", PUBLISH_CAUSE, "llvm.load %qm", _tdm(0), ("fx.gpu.barrier()", "that wait")),
    "async_waited_unpublished": ("LDS001", PUBLISH_CAUSE, "llvm.load %q", ASYNC_OP, ("fx.gpu.barrier()", "that wait")),
    "tdm_read_before_own_wait": ("LDS010", "no covering s_wait_asynccnt/s_wait_tensorcnt before this access",
                                 "llvm.load %qo", _tdm(0), ("tdm_ops.tensor_wait(n)",)),
    "tdm_wait_too_weak": ("LDS011", None, "llvm.load %qm1", _tdm(1), ("tensor_wait",)),
}
FIXED = {"tdm_waited_unpublished": "tdm_waited_published", "async_waited_unpublished": "async_waited_published",
         "tdm_read_before_own_wait": "tdm_read_after_own_wait", "tdm_wait_too_weak": "tdm_wait_strong_enough"}


def _verdict(report) -> list:
    """What a kernel author acts on, per violation: rule, cause line, both lines, fix hint, count."""
    return sorted((v.code, v.message, v.site.line, v.other_site.line if v.other_site else None, v.fix, v.extra)
                  for v in report.violations)


def _line_of(text: str, needle: str) -> int:
    """1-based line of the only line of `text` containing `needle`."""
    (line,) = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    return line


@pytest.mark.parametrize("name", list(BUGS))
def test_bug_is_reported_with_rule_cause_lines_and_fix_under_every_policy(name):
    code, cause, this_text, other_text, fix_words = BUGS[name]
    text = KERNELS[name]
    verdicts = [_verdict(sanitize_text(text, p)) for p in ALL_POLICIES]
    assert all(v == verdicts[0] for v in verdicts), f"{name}: verdict depends on the policy"
    got = verdicts[0]
    assert {g[0] for g in got} == {code}, got
    for _code, message, line, other_line, fix, _extra in got:
        assert (line, other_line) == (_line_of(text, this_text), _line_of(text, other_text))
        if cause is not None:
            assert cause in message
        assert all(w in fix for w in fix_words), fix


def test_unpublished_copy_names_the_barrier_fix_not_the_wait_count():
    report = sanitize_text(KERNELS["tdm_waited_unpublished"])
    (v,) = report.violations
    assert v.name == "raw-unpublished" and v.waves == {1} and v.other_waves == {0}
    assert "tensor_wait(n) / fx.rocdl.s_wait_asynccnt(n) completes the copy for that wave only" in v.fix
    assert "lower" not in v.fix.lower()


def test_wait_too_weak_reports_the_count_that_suffices():
    report = sanitize_text(KERNELS["tdm_wait_too_weak"])
    weak = [v for v in report.violations if v.code == "LDS011"]
    assert weak and {v.extra for v in weak} == {0}  # tensor_wait(0) before the barrier


@pytest.mark.parametrize("name", sorted(set(FIXED.values())))
def test_fixed_twin_is_clean_under_every_policy(name):
    for policy in ALL_POLICIES:
        report = sanitize_text(KERNELS[name], policy)
        assert report.clean, (name, policy, _verdict(report))

"""Issue #13 end to end: a flag handed through LDS without a barrier, in small MLIR kernels
instrumented by the pass and run on the virtual gfx1250 under every scheduler policy. The
spin-waits run a schedule-dependent number of times; the report may not depend on it."""

from __future__ import annotations

import pytest

from ldssan.runtime.emu import ALL_POLICIES

from ..emu.test_ops import module
from ..sanitizer.test_copies_e2e import PARAMS, sanitize_text

PROLOGUE = """
      %base = llvm.mlir.addressof @lds : !llvm.ptr<3>
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c2 = arith.constant 2 : i32
      %c32 = arith.constant 32 : i32
      %c64 = arith.constant 64 : i32
      %fp = llvm.getelementptr %base[%c64] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32
      %wid = arith.divui %t, %c32 : i32
      %lane = arith.remui %t, %c32 : i32
      %is_w0 = arith.cmpi eq, %wid, %c0 : i32
      %dp = llvm.getelementptr %base[%lane] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i32"""
INIT_FLAG = """
      %t0 = arith.cmpi eq, %t, %c0 : i32
      scf.if %t0 {
        llvm.store %c0, %fp : i32, !llvm.ptr<3>
      }
      gpu.barrier"""


def _spin_until(value: str, tag: str) -> str:
    return f"""
        scf.while : () -> () {{
          %f{tag} = llvm.load %fp : !llvm.ptr<3> -> i32  // poll {tag}
          %z{tag} = arith.cmpi ne, %f{tag}, {value} : i32
          scf.condition(%z{tag})
        }} do {{
          scf.yield
        }}"""


# wave 1 publishes data and raises the flag, then reads the flag back; wave 0 spins on it
# and reads the data (the writer's own read-back once turned this into LDS002)
HANDOFF = PROLOGUE + INIT_FLAG + f"""
      scf.if %is_w0 {{{_spin_until("%c1", "a")}
        %r = llvm.load %dp : !llvm.ptr<3> -> i32  // read data
        %p = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %r, %p : i32, !llvm.ptr<1>
      }} else {{
        %g = llvm.getelementptr %src[%lane] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        %v = llvm.load %g : !llvm.ptr<1> -> i32
        llvm.store %v, %dp : i32, !llvm.ptr<3>  // write data
        llvm.store %c1, %fp : i32, !llvm.ptr<3>  // raise flag
        %back = llvm.load %fp : !llvm.ptr<3> -> i32
        %pb = llvm.getelementptr %out[%t] : (!llvm.ptr<1>, i32) -> !llvm.ptr<1>, i32
        llvm.store %back, %pb : i32, !llvm.ptr<1>
      }}"""

# ping-pong: wave 0 raises the flag to 1 and spins for 2; wave 1 spins for 1 and sets 2
# (the flag starts as whatever LDS held; under `reverse` wave 1 polls twice, once otherwise:
# the race was once counted per poll)
PING_PONG = PROLOGUE + f"""
      scf.if %is_w0 {{
        llvm.store %c1, %fp : i32, !llvm.ptr<3>  // ping{_spin_until("%c2", "a")}
      }} else {{{_spin_until("%c1", "b")}
        llvm.store %c2, %fp : i32, !llvm.ptr<3>  // pong
      }}"""


def _line(text: str, marker: str) -> int:
    (n,) = [i for i, ln in enumerate(text.splitlines(), 1) if marker in ln]
    return n


def _verdicts(body: str):
    text = module(body, PARAMS, 512)
    out = {}
    for policy in ALL_POLICIES:
        report = sanitize_text(text, str(policy))
        out[str(policy)] = sorted((v.code, v.cause.name, v.site.line, v.other_site.line, v.count)
                                  for v in report.violations)
    return text, out


@pytest.mark.parametrize("name", ["handoff", "ping_pong"])
def test_flag_handoff_report_is_lds001_and_identical_under_every_policy(name):
    body = {"handoff": HANDOFF, "ping_pong": PING_PONG}[name]
    text, verdicts = _verdicts(body)
    first = verdicts["round-robin"]
    for policy, v in verdicts.items():
        assert v == first, f"{policy}: {v} != round-robin: {first}"
    pairs = {(code, site, other) for code, _c, site, other, _n in first}
    assert {code for code, _s, _o in pairs} <= {"LDS001", "LDS003"}, first
    if name == "handoff":
        assert pairs == {("LDS001", _line(text, "poll a"), _line(text, "raise flag")),
                         ("LDS001", _line(text, "read data"), _line(text, "write data"))}
    else:
        assert ("LDS001", _line(text, "poll b"), _line(text, "ping")) in pairs
        assert ("LDS001", _line(text, "poll a"), _line(text, "pong")) in pairs

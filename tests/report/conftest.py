"""Fixtures for the decode/report tests: a small site table modelled on FlyDSL's
`k_lds.py` example (store, barrier, neighbour load) plus a TDM pipeline, and a
`match_lines` helper in the spirit of pytester's `fnmatch_lines`."""

from __future__ import annotations

import copy
import fnmatch

import pytest

from ldssan.decode import SiteTable
from ldssan.runtime.records import NO_SITE, Cause, Record

KERNEL_FILE = "/src/kernels/k_lds.py"
GEMM_FILE = "/src/kernels/gemm.py"

SITE_TABLE = {
    "kernel": "lds_neighbour",
    "sites": [
        {"id": 0, "kind": "ds_write", "op": "llvm.store", "file": KERNEL_FILE, "line": 14,
         "col": 4, "function": "lds_neighbour",
         "chain": [{"file": KERNEL_FILE, "line": 14, "col": 4, "function": "lds_neighbour"},
                   {"file": KERNEL_FILE, "line": 22, "col": 4, "function": "launch"}],
         "text": "    lds[tid] = fx.Int32(tid) * 10", "buffer": "lds", "bytes": 4},
        {"id": 1, "kind": "ds_read", "op": "llvm.load", "file": KERNEL_FILE, "line": 17,
         "col": 8, "function": "lds_neighbour", "chain": [],
         "text": "    Out[tid] = lds[(tid + 1) % N]", "buffer": "lds", "bytes": 4},
        {"id": 2, "kind": "barrier", "op": "rocdl.s.barrier.signal", "file": KERNEL_FILE,
         "line": 15, "col": 4, "function": "lds_neighbour",
         "text": "    fx.rocdl.s_barrier_signal(-1)"},
        {"id": 3, "kind": "tdm_load", "op": "rocdl.tensor.load.to.lds", "file": GEMM_FILE,
         "line": 40, "col": 8, "function": "issue", "text": "        tdm_ops.tensor_load_2d(desc)",
         "buffer": "smem_a", "bytes": 4096},
        {"id": 4, "kind": "wait", "op": "rocdl.s.wait.tensorcnt", "file": GEMM_FILE,
         "line": 50, "col": 8, "function": "gemm", "text": "        tdm_ops.tensor_wait(1)"},
        {"id": 5, "kind": "ds_read", "op": "rocdl.ds.load.tr16.b128", "file": GEMM_FILE,
         "line": 55, "col": 12, "function": "gemm", "text": "            a = smem_a.load_tr(k)",
         "buffer": "smem_a", "bytes": 16},
    ],
    "buffers": [
        {"name": "lds", "offset": 0, "size": 256},
        {"name": "smem_a", "offset": 256, "size": 8192},
        {"name": "smem_a_stage1", "offset": 256 + 4096, "size": 4096},  # nested in smem_a
    ],
}


@pytest.fixture
def site_json() -> dict:
    """The raw site-table JSON object (a fresh copy per test)."""
    return copy.deepcopy(SITE_TABLE)


@pytest.fixture
def sites() -> SiteTable:
    return SiteTable.from_json(SITE_TABLE)


@pytest.fixture
def raw_records() -> list[Record]:
    """LDS001: each of 64 lanes (2 waves) reads its neighbour's unpublished store."""
    out = []
    for wave in range(2):
        for lane in range(32):
            tid = wave * 32 + lane
            nb = (tid + 1) % 64
            out.append(Record(rule=1, cause=2, site=1, other_site=0, lds_offset=4 * nb,
                              wave=wave, other_wave=nb // 32, lane=lane, other_lane=nb % 32))
    return out


def _match_lines(text: str, patterns: list[str]) -> None:
    """Each pattern must match a line, in order; report the first that does not.
    Only `*` and `?` are wildcards (`[` is literal: source lines are full of brackets)."""
    lines = text.splitlines()
    pos = 0
    for raw in patterns:
        pat = raw.replace("[", "[[]")
        for i in range(pos, len(lines)):
            if fnmatch.fnmatchcase(lines[i], pat):
                pos = i + 1
                break
        else:
            tail = "\n".join(lines[pos:pos + 40])
            pytest.fail(f"no line after line {pos} matches {raw!r}; remaining text:\n{tail}")


@pytest.fixture
def match_lines():
    return _match_lines


def mixed_records(lds011_other: int = 4) -> list[Record]:
    """One record of each other kind: LDS011 at the tdm read (site 5; its other site given),
    LDS013 at a wave end, LDS020 barrier mismatch, LDS030 at a site not in the table."""
    return [
        Record(11, Cause.COPY_NOT_WAITED, 5, lds011_other, lds_offset=256 + 16, wave=1, other_wave=1, extra=0),
        Record(13, Cause.WAVE_END, 3, NO_SITE, lds_offset=256, wave=3),
        Record(20, Cause.BARRIER_MISMATCH, 2, 2, wave=0, other_wave=1),
        Record(30, Cause.NONE, 17, NO_SITE, lds_offset=0x9000, wave=0, lane=3),
    ]

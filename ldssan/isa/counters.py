"""Static per-counter analysis over every path of a kernel's CFG.

Which counter each instruction increments and how each `s_wait_*` retires ops follow the
gfx1250 model (docs/memory-model.md, counters): dscnt,
loadcnt, storecnt, asynccnt and tensorcnt complete in order within their type, so
`s_wait_<cnt> N` retires every op of that counter except the N most recent. A FLAT op
counts on dscnt and on loadcnt/storecnt and completes out of order with the LDS queue:
only a wait for 0 on a counter retires it there.

Abstract state (a may-analysis): for each counter, the ops that may still be outstanding,
each with the *fewest* younger ops of that counter issued after it on any path reaching
here. `s_wait_<cnt> N` retires an op on every path iff that number is >= N. Joins take
the union and the minimum; counts saturate at 64 (above any 6-bit wait), so loops converge.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .asm import Instr, Kernel
from .cfg import IsaUnsupportedError, build_cfg

COUNTERS = ("dscnt", "loadcnt", "storecnt", "asynccnt", "tensorcnt")
_CAP = 64

# Prefix -> counters. Order matters: the async/tensor forms also start with global_/tensor_.
_ISSUE = (
    (("global_load_async_to_lds", "global_store_async_from_lds", "cluster_load_async_to_lds",
      "ds_atomic_async_barrier_arrive"), ("asynccnt",)),
    (("tensor_load_to_lds", "tensor_store_from_lds"), ("tensorcnt",)),
    (("flat_load",), ("loadcnt", "dscnt")),
    (("flat_store",), ("storecnt", "dscnt")),
    (("flat_atomic",), ("storecnt", "dscnt")),
    (("ds_",), ("dscnt",)),
    (("global_load", "buffer_load", "scratch_load", "cluster_load", "global_inv"), ("loadcnt",)),
    (("global_store", "buffer_store", "scratch_store", "global_wb"), ("storecnt",)),
    (("global_atomic", "buffer_atomic"), ("storecnt",)),
)
_NOT_COUNTED = ("ds_nop",)

# DS instructions that write LDS (stores and read-modify-write atomics).
_LDS_WRITE = re.compile(
    r"^ds_(store|write|wrxchg|add|sub|rsub|inc|dec|min|max|and|or|xor|mskor|cmpst|cmpstore|cond_sub|pk_add)")


def returns_data(ins: Instr) -> bool:
    return "TH_ATOMIC_RETURN" in ins.text or "_rtn" in ins.mnemonic


def counters_of(ins: Instr) -> tuple[str, ...]:
    m = ins.mnemonic
    if m.startswith(_NOT_COUNTED):
        return ()
    for prefixes, counters in _ISSUE:
        if m.startswith(prefixes):
            # A VMEM atomic that returns its old value counts as a load, else as a store.
            if "storecnt" in counters and "_atomic" in m and returns_data(ins):
                return tuple("loadcnt" if c == "storecnt" else c for c in counters)
            return counters
    return ()


def writes_lds(ins: Instr) -> bool:
    return bool(_LDS_WRITE.match(ins.mnemonic))


def _out_of_order(ins: Instr) -> bool:
    return ins.mnemonic.startswith("flat_")


_NAMED = re.compile(r"(\w+)\((\d+)\)")


def _imm(kernel: Kernel, ins: Instr) -> int:
    try:
        return int(ins.operands[0], 0)
    except (IndexError, ValueError):
        raise IsaUnsupportedError(kernel.name, ins, "wait count is not an integer") from None


def waits_of(kernel: Kernel, ins: Instr) -> dict[str, int]:
    """The counters an `s_wait_*` instruction waits on, with their counts ({} if none)."""
    m = ins.mnemonic
    if not m.startswith("s_wait_"):
        return {}
    name = m[len("s_wait_"):]
    if name == "idle":  # waits until every counter is zero
        return dict.fromkeys(COUNTERS, 0)
    if name in COUNTERS:
        return {name: _imm(kernel, ins)}
    if name in ("loadcnt_dscnt", "storecnt_dscnt"):
        first = name.split("_")[0]
        named = dict(_NAMED.findall(" ".join(ins.operands)))
        if named:
            return {c: int(v) for c, v in named.items() if c in (first, "dscnt")}
        # Packed simm16 (gfx12): the first counter in bits [13:8], dscnt in bits [5:0].
        imm = _imm(kernel, ins)
        return {first: (imm >> 8) & 0x3F, "dscnt": imm & 0x3F}
    return {}  # kmcnt, xcnt, expcnt, event: no counter of ours


State = dict[str, dict[int, int]]  # counter -> {issuing instr index: fewest younger ops}


def _join(a: State, b: State) -> State:
    out = {c: dict(ops) for c, ops in a.items()}
    for c, ops in b.items():
        mine = out.setdefault(c, {})
        for op, n in ops.items():
            mine[op] = min(n, mine.get(op, _CAP))
    return out


def step(kernel: Kernel, state: State, ins: Instr) -> State:
    """The state after `ins`."""
    waits = waits_of(kernel, ins)
    if waits:
        state = {c: dict(ops) for c, ops in state.items()}
        for c, n in waits.items():
            ops = state.get(c, {})
            for op in list(ops):
                if ops[op] >= n and (n == 0 or not _out_of_order(kernel.instrs[op])):
                    del ops[op]
        return state
    counters = counters_of(ins)
    if not counters:
        return state
    state = {c: dict(ops) for c, ops in state.items()}
    for c in counters:
        ops = state.setdefault(c, {})
        for op in ops:
            ops[op] = min(ops[op] + 1, _CAP)
        ops[ins.index] = 0
    return state


def walk(kernel: Kernel) -> Iterator[tuple[Instr, State]]:
    """Every instruction with the state *before* it, at the fixed point over all paths."""
    blocks = build_cfg(kernel)
    entry: dict[int, State] = {0: {}}
    work = [0]
    while work:
        b = work.pop()
        state = entry[b]
        for i in range(blocks[b].start, blocks[b].end):
            state = step(kernel, state, kernel.instrs[i])
        for s in blocks[b].succs:
            merged = _join(entry[s], state) if s in entry else state
            if s not in entry or merged != entry[s]:
                entry[s] = merged
                work.append(s)
    for b, blk in enumerate(blocks):
        if b not in entry:
            continue  # unreachable code: no path runs it
        state = entry[b]
        for i in range(blk.start, blk.end):
            yield kernel.instrs[i], state
            state = step(kernel, state, kernel.instrs[i])

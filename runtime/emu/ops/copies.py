"""Asynchronous copies into and out of LDS: TDM (TENSORcnt) and per-lane async loads (ASYNCcnt).

The copies themselves (`R.tdm_copy`, `R.AsyncCopy`) live in `rt/copies.py`.

Issuing queues the copy on the wave (`ctx.issue`) and yields `events.Issue(counter)`; the copy
moves its data when completed — at the covering wait, at issue (`+early`), or at a random
point in between (`+random`), as the scheduler's async policy decides. A wave that ends
drains its copies.
"""

from __future__ import annotations

from ldssan.passes.abi import ASYNC_WIDTH_BYTES
from ldssan.passes.ir.irview import Op
from ..events import ISSUE_ASYNC, ISSUE_TENSOR
from . import emits


@emits("rocdl.tensor.load.to.lds", "rocdl.tensor.store.from.lds")
def tensor_copy(t, op: Op) -> None:
    g = ", ".join(t.v(x) for x in op.operands[:4])
    to_lds = op.name.endswith("to.lds")
    t.out(f"ctx.issue('tensor', R.tdm_copy(ctx, {g}, {to_lds}, {t.mask}))")
    t.yield_event(ISSUE_TENSOR)


def _async_copy(t, op: Op) -> None:
    gptr, lptr = op.operands[:2]
    nbytes = ASYNC_WIDTH_BYTES[op.name.rsplit(".", 1)[1]]
    offset = int(op.attr("offset", 0) or 0)
    to_lds = ".load." in op.name
    t.out(f"ctx.issue('async', R.AsyncCopy(ctx, {t.lanes(gptr)}, {t.lanes(lptr)}, {nbytes}, {offset}, "
          f"{to_lds}, {t.mask}))")
    t.yield_event(ISSUE_ASYNC)


for _suffix in ASYNC_WIDTH_BYTES:
    emits(f"rocdl.global.load.async.to.lds.{_suffix}", f"rocdl.global.store.async.from.lds.{_suffix}")(_async_copy)

"""`ldssan.rows.explain`: from the output elements that vary between runs to the LDS races
whose values reach them.

Three kinds of run of the same call, with identical inputs (`func()` builds them):
1. one sanitized run (policy 0): the happens-before engine names the races; its verdict
   is the same under every policy but may be decided after the racy read ran;
2. one sanitized run with taint (policy 1): exactly the accesses the first run found racy
   (site, workgroups, waves, lanes) taint the values they load (or, for write-write races,
   the bytes they store); the taint follows the data to global memory (`runtime/emu/taint`);
3. plain emulated runs for the remaining policies.
All K outputs are compared bitwise; a varying element is explained by the races whose
taint reached it. By default each sanitized call picks its batch from its IR (`batching`:
workgroups side by side only when independent) and the plain runs reuse that choice.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import numpy as np

from ldssan import hook
from ldssan.decode import merge_reports
from ldssan.runtime.records import Rule
from ldssan.runtime.emu import emulate
from ldssan.runtime.emu.taint import MAX_BITS, TaintSource, tracking

from .batching import AutoBatch
from .pytest_call import PytestCall
from .report import OutputRows, RaceRows, RowsReport
from .variation import RowsError, check_tolerance, compare, named_outputs, policies, snapshot

# rules whose verdict is "this value depends on the schedule"
RACE_RULES = frozenset({Rule.RAW_UNPUBLISHED, Rule.WAR_REUSE, Rule.WAW, Rule.DMA_READ_BEFORE_WAIT,
                        Rule.WAIT_TOO_WEAK, Rule.DMA_OVERLAP, Rule.UNINIT_READ})
_READS = frozenset({"ds_read", "ds_atomic"})
_WRITES = frozenset({"ds_write", "ds_atomic"})


def _bit(k: int) -> int:
    # races past the 63rd share bit 63: an element they reach is blamed on all of them
    return min(k, MAX_BITS - 1)


def taint_sources(races) -> list[TaintSource]:
    """The racy accesses of each race (a decoded `Violation`), with the race's bit."""
    out = []
    for k, v in enumerate(races):
        waw = int(v.rule) in (Rule.WAW, Rule.DMA_OVERLAP)
        sides = [(v.site, v.waves)]
        if v.other_site is not None:
            sides.append((v.other_site, v.other_waves))
        for site, waves in sides:
            reads, writes = site.kind in _READS, waw and site.kind in _WRITES
            if reads or writes:
                # every active lane: the engine records one lane per racy instruction (the
                # first), so the lane sets of a report are not the racy lanes
                out.append(TaintSource(v.kernel, site.id, _bit(k), frozenset(waves), frozenset(),
                                       frozenset(v.workgroups), reads, writes))
    return out


def _progress(enabled: bool):
    if not enabled:
        return nullcontext(None)
    from rich.progress import Progress

    return Progress(transient=True)


def explain(func=None, runs: int = 16, reference=None, row_dim: int = 0, *, policies_=None, progress: bool = False,
            rtol: float = 1e-3, atol: float = 1e-5, observed=None, batch: int | None = None,
            pytest: str | None = None) -> RowsReport:
    """Run `func()` (it launches FlyDSL kernels and returns the output tensor(s): a tensor, a
    tuple or a dict) `runs` times on the virtual gfx1250 and explain its varying elements.
    `pytest`: instead of `func`, a test id `path/test_x.py::test_y`; the tensors its launches
    write are the outputs (`pytest_call.PytestCall`).

    `reference`: a function returning the expected output(s) (same structure); elements not
    close to it (`rtol`, `atol`) in any run count as varying too. `row_dim`: the axis whose
    index is a "row". `policies_`: the scheduler policies to use (default: `policies(runs)`).
    `batch`: workgroups run in lockstep per emulator batch; None (default) decides from each
    call's IR (`batching.AutoBatch`: batched only when workgroups are independent). `observed`: outputs saved from runs elsewhere (a real GPU), one structure per run: the
    varying elements come from them, the explanation from the virtual gfx1250's two runs.
    """
    if observed is not None:
        if len(observed) < 2:
            raise RowsError(f"--observed needs the outputs of at least 2 runs (got {len(observed)})")
        runs = 2  # the virtual runs: sanitized, then with taint
    rtol, atol = check_tolerance("--rtol", rtol), check_tolerance("--atol", atol)
    if runs < 2:
        raise RowsError(f"--runs must be at least 2 (got {runs}): variation needs two runs")
    if batch is not None and batch < 1:
        raise RowsError(f"--batch must be at least 1 (got {batch})")
    if (func is None) == (pytest is None):
        raise RowsError("give either a function or a pytest test id (--pytest), not both or neither")
    if pytest is not None:
        func = PytestCall(pytest)
    auto = AutoBatch() if batch is None else None
    pols = policies(runs, policies_)
    timings: dict[str, float] = {}
    outs = []
    with _progress(progress) as bar:
        task = bar.add_task("ldssan rows", total=runs) if bar else None

        def step(name):
            if bar:
                bar.update(task, advance=1, description=f"ldssan rows: {name}")

        t0 = time.perf_counter()
        with hook.sanitize(pols[0], batch=auto or batch) as col:
            outs.append(snapshot(func()))
        timings["sanitize"] = time.perf_counter() - t0
        if not col.results and not isinstance(func, PytestCall):  # a test that launches nothing: _written_only
            raise RowsError(f"{getattr(func, '__name__', func)!r} launched no FlyDSL kernel: nothing ran on the "
                            "virtual gfx1250, so nothing was checked (it computes its outputs some other way)")
        step("sanitized")
        # one entry per race over all launches (a test launches its kernel many times)
        merged = merge_reports(*(r.report for r in col.results)) if col.results else None
        violations = [v for v in (merged.violations if merged else ()) if v.severity == "error"]
        races = [v for v in violations if int(v.rule) in RACE_RULES]

        t0 = time.perf_counter()
        with tracking(taint_sources(races)) as st, hook.sanitize(pols[1], batch=auto or batch):
            result = func()
            taints = {n: st.tensor_taint(t) for n, t in named_outputs(result)}
            outs.append(snapshot(result))
        timings["taint"] = time.perf_counter() - t0
        step("taint")

        t0 = time.perf_counter()
        plain = auto.batch if auto else batch  # the sanitized calls' decision, for the whole run
        for p in pols[2:] if observed is None else ():
            with emulate(str(p), batch=plain):
                outs.append(snapshot(func()))
            step(str(p))
        timings["emulate"] = time.perf_counter() - t0

    ref = snapshot(reference()) if reference is not None else None
    if observed is not None:
        outs = [snapshot(o) for o in observed]
        _same_structure(outs[0], snapshot(result))
    if isinstance(func, PytestCall):
        outs = _written_only(func, outs)
    if ref is not None and [n for n, _ in ref] != [n for n, _ in outs[0]]:
        raise RowsError(f"the reference returns outputs {[n for n, _ in ref]}, the function {[n for n, _ in outs[0]]}")
    var = compare(outs, ref, rtol=rtol, atol=atol)
    report = _assemble(pols if observed is None else pols[:2], var, [taints[v.name] for v in var], races, row_dim,
                       timings, violations)
    report.batch = plain
    report.batch_reason = auto.reason if auto else "given"
    if isinstance(func, PytestCall):
        report.pytest = {"test": func.spec, "outcomes": func.outcomes}
    if observed is not None:
        report.runs, report.observed = len(outs), True
    return report


def _written_only(call: PytestCall, outs):
    """The runs' outputs cut to the tensors some launch wrote; every run must have launched
    the same kernels with the same tensor arguments."""
    names = [n for n, _ in outs[0]]
    for k, run in enumerate(outs[1:], 2):
        if [n for n, _ in run] != names:
            raise RowsError(f"--pytest {call.spec!r}: run {k} launched {[n for n, _ in run]}, run 1 {names}: "
                            "the test must make the same launches every time")
    if not call.written:
        raise RowsError(f"--pytest {call.spec!r}: its launches wrote none of their tensor arguments {names}")
    return [[(n, t) for n, t in run if n in call.written] for run in outs]


def _same_structure(saved, emulated) -> None:
    got = [(n, tuple(t.shape)) for n, t in saved]
    want = [(n, tuple(t.shape)) for n, t in emulated]
    if got != want:
        raise RowsError(f"the observed outputs {got} do not match what the function returns {want}")


def _rows_of(mask: np.ndarray, row_dim: int) -> list[int]:
    if mask.ndim == 0:
        return [0] if bool(mask) else []
    axes = tuple(d for d in range(mask.ndim) if d != row_dim)
    return np.flatnonzero(mask.any(axis=axes) if axes else mask).tolist()


def _assemble(pols, var, taints, races, row_dim, timings, violations) -> RowsReport:
    outputs = []
    per_race = [dict(elements=0, reached=0, rows=set(), outputs={}) for _ in races]
    for v, bits in zip(var, taints):
        if v.varying.ndim and not 0 <= row_dim < v.varying.ndim:
            raise RowsError(f"--row-dim {row_dim} is outside output {v.name!r} of shape {v.shape}")
        explained = v.varying & (bits != 0)
        mismatch = (v.mismatch if v.mismatch is not None else np.zeros_like(v.varying)) & (bits == 0)
        unexplained = v.varying & (bits == 0) & ~mismatch
        outputs.append(OutputRows(v.name, v.shape, int(v.varying.sum()), _rows_of(v.varying, row_dim),
                                  int(unexplained.sum()), _rows_of(unexplained, row_dim),
                                  v.varying, bits, int(mismatch.sum()), _rows_of(mismatch, row_dim)))
        for k in range(len(races)):
            hit = (bits >> np.uint64(_bit(k))) & np.uint64(1) != 0
            mine = explained & hit
            acc = per_race[k]
            acc["reached"] += int(hit.sum())
            if mine.any():
                rows = _rows_of(mine, row_dim)
                acc["elements"] += int(mine.sum())
                acc["rows"].update(rows)
                acc["outputs"][v.name] = {"elements": int(mine.sum()), "rows": rows}
    entries = [RaceRows.of(v, k, acc["elements"], sorted(acc["rows"]), acc["reached"], acc["outputs"],
                           shared_bit=_bit(k) == MAX_BITS - 1 and len(races) > MAX_BITS - 1)
               for k, (v, acc) in enumerate(zip(races, per_race))]
    return RowsReport(
        runs=len(pols), policies=[str(p) for p in pols], outputs=outputs,
        races=[e for e in entries if e.elements], latent=[e for e in entries if not e.elements],
        timings=timings, violations=violations)

"""The `ldssan rows` result: `RowsReport`, its JSON (schema `ldssan.rows/1`), the rich
terminal table and the PNG heatmap."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ldssan.variants import original_path

SCHEMA = "ldssan.rows/1"
MAX_BINS = 512  # heatmap bins per axis: larger outputs are binned


def where(site) -> str:
    """`file:line:col` of a site or an IR frame (both have .file/.line/.col), paths relative
    under the working directory, columns 1-based."""
    if site is None:
        return ""
    path = original_path(site.file)  # a variant's race belongs to the file it was made from
    if os.path.isabs(path) and not os.path.relpath(path).startswith(".."):
        path = os.path.relpath(path)  # as the other reports print paths under the working directory
    return f"{path}:{site.line}:{site.col + 1}"  # columns 1-based, as in the text report


@dataclass
class RaceRows:
    """One race (a report's violation) and the varying elements its taint reached."""

    rule: str
    name: str
    cause: str
    message: str
    kernel: str
    this: str
    this_text: str
    other: str
    other_text: str
    elements: int  # varying elements it explains
    rows: list[int]
    reached: int  # output elements its taint reached, varying or not
    outputs: dict
    index: int  # the race's number (its taint bit, unless shared_bit)
    shared_bit: bool = False  # a race past the 63rd: shares bit 63 with the others past it

    @classmethod
    def of(cls, v, index, elements, rows, reached, outputs, *, shared_bit=False) -> "RaceRows":
        other = v.other_site
        return cls(v.code, v.name, getattr(v.cause, "name", str(v.cause)).lower().replace("_", "-"), v.message,
                   v.kernel, where(v.site), v.site.text.strip(), where(other),
                   other.text.strip() if other is not None else "", elements, rows, reached, outputs, index,
                   shared_bit)

    def to_dict(self) -> dict:
        return {"rule": self.rule, "name": self.name, "cause": self.cause, "message": self.message,
                "kernel": self.kernel, "this": self.this, "this_text": self.this_text, "other": self.other,
                "other_text": self.other_text, "elements": self.elements, "rows": self.rows,
                "reached": self.reached, "outputs": self.outputs, "shared_bit": self.shared_bit}


@dataclass
class OutputRows:
    name: str
    shape: tuple[int, ...]
    varying: int
    varying_rows: list[int]
    unexplained: int
    unexplained_rows: list[int]
    varying_mask: np.ndarray = field(repr=False)
    taint: np.ndarray = field(repr=False)  # uint64 race bits per element
    # varying elements no race reached that differ from --reference identically in every run
    # (counted apart from `unexplained`: no schedule changed them)
    mismatch: int = 0
    mismatch_rows: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "varying": self.varying,
                "varying_rows": self.varying_rows, "unexplained": self.unexplained,
                "unexplained_rows": self.unexplained_rows, "reference_mismatch": self.mismatch,
                "reference_mismatch_rows": self.mismatch_rows}


@dataclass
class RowsReport:
    runs: int
    policies: list[str]
    outputs: list[OutputRows]
    races: list[RaceRows]  # races that explain at least one varying element
    latent: list[RaceRows]  # races whose taint reached no varying element in these runs
    timings: dict = field(default_factory=dict)
    violations: list = field(default_factory=list, repr=False)  # every error of the sanitized run
    observed: bool = False  # the runs were given (--observed); `policies` are the 2 virtual runs
    batch: int = 1  # workgroups per emulator batch in the plain runs (replay with the same batch)
    batch_reason: str = "given"  # "given", or the automatic decision and why (`batching.AutoBatch`)
    pytest: dict | None = None  # --pytest: {"test": id, "outcomes": the test's verdict per run}

    @property
    def varying(self) -> int:
        return sum(o.varying for o in self.outputs)

    @property
    def unexplained(self) -> int:
        return sum(o.unexplained for o in self.outputs)

    @property
    def mismatch(self) -> int:
        return sum(o.mismatch for o in self.outputs)

    def to_dict(self) -> dict:
        extra = {"pytest": self.pytest} if self.pytest is not None else {}
        return {"schema": SCHEMA, "runs": self.runs, "policies": self.policies, "batch": self.batch,
                "batch_reason": self.batch_reason, "observed": self.observed, **extra,
                "outputs": [o.to_dict() for o in self.outputs], "races": [r.to_dict() for r in self.races],
                "unexplained": self.unexplained, "reference_mismatch": self.mismatch,
                "latent": [r.to_dict() for r in self.latent],
                "seconds": {k: round(v, 3) for k, v in self.timings.items()}}

    def to_json(self, path=None) -> str:
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            with open(path, "w") as fh:
                fh.write(text)
        return text


def _rows_text(rows: list[int], limit: int = 12) -> str:
    shown = ", ".join(map(str, rows[:limit]))
    return shown + (f", … ({len(rows)} rows)" if len(rows) > limit else "")


def render(report: RowsReport):
    """A rich renderable: the outputs, the races that explain them, unexplained and latent."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts = []
    head = Table(title=f"ldssan rows: {report.runs} runs ({', '.join(report.policies)})", show_lines=False)
    for col in ("output", "shape", "varying", "varying rows", "unexplained"):
        head.add_column(col)
    for o in report.outputs:
        head.add_row(Text(o.name), "×".join(map(str, o.shape)) or "scalar", str(o.varying), _rows_text(o.varying_rows),
                     Text(str(o.unexplained), style="bold red" if o.unexplained else ""))
    head.caption = f"batch {report.batch}: {report.batch_reason}"
    parts.append(head)
    if report.pytest is not None:
        parts.append(Text(f"test {report.pytest['test']}: {', '.join(report.pytest['outcomes'])}"))
    if report.races:
        races = Table(title="races that explain varying elements")
        for col in ("rule", "this access", "other access", "elements", "rows"):
            races.add_column(col)
        for r in report.races:
            races.add_row(Text(f"{r.rule} {r.name}\n{r.cause}"), Text(f"{r.this}\n{r.this_text}"),
                          Text(f"{r.other}\n{r.other_text}"), str(r.elements), _rows_text(r.rows))
        parts.append(races)
    if report.unexplained:
        rows = sorted({r for o in report.outputs for r in o.unexplained_rows})
        parts.append(Text(
            f"UNEXPLAINED: {report.unexplained} varying element(s) (rows {_rows_text(rows)}) are reached by no "
            "LDS race: the variation comes from outside LDS — global memory ordering, global atomics "
            "order (float atomics round differently in each order), or uninitialised global memory.",
            style="bold red"))
    if report.mismatch:
        rows = sorted({r for o in report.outputs for r in o.mismatch_rows})
        parts.append(Text(
            f"DIFFERS FROM THE REFERENCE: {report.mismatch} element(s) (rows {_rows_text(rows)}) differ from the "
            f"reference on every run, identically in all {report.runs} runs, and no LDS race reaches them: "
            "a wrong kernel or a wrong reference, not a race (no schedule changed them).", style="bold red"))
    for r in report.latent:
        parts.append(Text(f"latent: {r.rule} {r.name} {r.this} / {r.other or '-'}: reached {r.reached} output "
                          f"element(s), none varied in these {report.runs} runs", style="yellow"))
    if not report.varying:
        parts.append(Text(f"nothing varies over {report.runs} runs", style="green"))
    return Group(*parts)


def render_text(report: RowsReport, width: int = 120) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)
    console.print(render(report))
    return console.export_text()


def _bin(a: np.ndarray, rows: int, cols: int, reduce) -> np.ndarray:
    """Reduce a 2-D array onto at most MAX_BINS x MAX_BINS bins."""
    br, bc = -(-rows // min(rows, MAX_BINS)), -(-cols // min(cols, MAX_BINS))
    pr, pc = -(-rows // br) * br, -(-cols // bc) * bc
    pad = np.zeros((pr, pc), dtype=a.dtype)
    pad[:rows, :cols] = a
    return reduce(reduce(pad.reshape(pr // br, br, pc // bc, bc), axis=3), axis=1)


def write_png(report: RowsReport, path, row_dim: int = 0) -> None:
    """Heatmap per output: rows x columns (binned), varying elements coloured by the first
    race that explains them, unexplained ones black; needs matplotlib (extra `rows`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    races = report.races
    base = plt.get_cmap("tab10")
    colors = ["#f2f2f2", "#000000"] + [base(i % 10) for i in range(len(races))]
    fig, axes = plt.subplots(len(report.outputs), 1, squeeze=False,
                             figsize=(8, 1.5 + 3 * len(report.outputs)))
    for ax, o in zip(axes[:, 0], report.outputs):
        vary = np.moveaxis(np.atleast_1d(o.varying_mask), row_dim if o.varying_mask.ndim else 0, 0)
        bits = np.moveaxis(np.atleast_1d(o.taint), row_dim if o.taint.ndim else 0, 0)
        vary = vary.reshape(vary.shape[0], -1)
        bits = bits.reshape(bits.shape[0], -1)
        cat = np.where(vary, 1, 0).astype(np.int64)  # 1 = unexplained until a race claims it
        for i, r in reversed(list(enumerate(races))):
            hit = vary & ((bits >> np.uint64(min(r.index, 63))) & np.uint64(1) != 0)
            cat[hit] = 2 + i
        # a bin shows its highest category: a race or an unexplained element beats "clean"
        img = _bin(cat, *cat.shape, np.max)
        ax.imshow(img, cmap=ListedColormap(colors), vmin=0, vmax=len(colors) - 1, aspect="auto",
                  interpolation="nearest")
        ax.set_title(f"{o.name} {tuple(o.shape)}: {o.varying} varying, {o.unexplained} unexplained")
        ax.set_ylabel("row" + (" (binned)" if cat.shape[0] > MAX_BINS else ""))
        ax.set_xlabel("column" + (" (binned)" if cat.shape[1] > MAX_BINS else ""))
    handles = [Patch(color=colors[0], label="identical"), Patch(color=colors[1], label="varying, unexplained")]
    handles += [Patch(color=colors[2 + i], label=f"{r.rule} {r.this}") for i, r in enumerate(races)]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize="small")
    fig.tight_layout(rect=(0, 0.08 + 0.03 * len(races), 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)

"""`ldssan rows`: which output elements vary between runs, and which LDS race feeds them.

    from ldssan import rows
    report = rows.explain(my_call, runs=16)      # my_call() launches kernels, returns tensor(s)
    print(rows.render_text(report)); report.to_json("rows.json"); rows.write_png(report, "rows.png")
"""

from .batching import AUTO_BATCH, AutoBatch, dependence
from .explain import RACE_RULES, explain, taint_sources
from .pytest_call import PytestCall
from .report import SCHEMA, OutputRows, RaceRows, RowsReport, render, render_text, write_png
from .variation import RowsError, compare, policies

__all__ = ["AUTO_BATCH", "AutoBatch", "PytestCall", "RACE_RULES", "SCHEMA", "dependence", "OutputRows", "RaceRows", "RowsError", "RowsReport", "compare", "explain",
           "policies", "render", "render_text", "taint_sources", "write_png"]

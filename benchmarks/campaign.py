"""The mutation campaign over the bundled kernels: prints JSON, writes the Markdown summary.

    python benchmarks/campaign.py                         # every kernel in ldssan.kernels.campaigns
    python benchmarks/campaign.py --markdown campaign.md --jobs 2 --launches 8
    python benchmarks/campaign.py --cluster local:2       # the same on a loopback dask cluster
    python benchmarks/campaign.py --quick                 # RMSNorm only, K = 2 (a smoke run, ~1 min on 2 cores)
    python benchmarks/campaign.py --store c.jsonl --resume  # continue an interrupted run
    python benchmarks/campaign.py --coop                  # FlyDSL's coop primitives (ldssan.mutate.coop)
    python benchmarks/campaign.py --all                   # the bundled kernels and the coop primitives
    python benchmarks/campaign.py --all --cluster local:2 --full-json --markdown benchmarks/campaign-all.md \
        > benchmarks/campaign-all.json                    # the figures of docs/campaigns.md (--table benchmarks/campaign-all.json)

The same as `ldssan mutate <each bundled kernel> -j 2 -k 8 --json - --markdown ...`: each
kernel's clean baseline is gated first, then every mutant runs once under the sanitizer
and K times under the output check. Kernels registered in `ldssan.kernels.campaigns` whose
module does not exist yet are skipped with a message. The budget (issue #17): >= 200
mutants (`--all`) in under 10 minutes on 2 cores; `within_budget` in the JSON says whether
it was, and `load_average` the machine's load when the run ended (a shared machine inflates
the wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from _common import machine

BUDGET_SECONDS = 600.0
QUICK_KERNEL = "ldssan.kernels.rmsnorm"


def main() -> int:
    from ldssan.kernels.campaigns import CAMPAIGNS
    from ldssan.mutate import CampaignConfig, run_campaign
    from ldssan.mutate import report

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernels", nargs="*", default=list(CAMPAIGNS), help="default: every registered kernel")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--launches", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--markdown", default="ldssan-campaign.md", help="where to write the Markdown summary")
    ap.add_argument("--full-json", action="store_true", help="print every mutant row, not only the summaries")
    ap.add_argument("--cluster", default=None, help="local:N or tcp://HOST:PORT: run on dask.distributed")
    ap.add_argument("--store", default=None, help="JSON-lines result store")
    ap.add_argument("--resume", action="store_true", help="skip the mutants --store already holds")
    ap.add_argument("--quick", action="store_true", help=f"only {QUICK_KERNEL}, K = 2: a smoke run")
    ap.add_argument("--coop", action="store_true", help="the coop-primitive campaign instead of the bundled one")
    ap.add_argument("--all", action="store_true", help="the bundled kernels, then the coop primitives")
    ap.add_argument("--table", nargs="+", metavar="JSON", default=None,
                    help="print the summary table of these --full-json outputs (kernels in order, one 'all' row) "
                         "and stop: how the table of docs/campaigns.md is regenerated")
    args = ap.parse_args()
    if args.table:
        print(_table(args.table))
        return 0
    if args.quick:
        args.kernels, args.launches = [QUICK_KERNEL], 2
    elif args.coop or args.all:
        from ldssan.mutate.coop import COOP

        args.kernels = [*(CAMPAIGNS if args.all else ()), *COOP]

    cfg = CampaignConfig(launches=args.launches, jobs=args.jobs, timeout=args.timeout, cluster=args.cluster,
                         store=args.store, resume=args.resume)
    with report.LiveView() as view:
        record = run_campaign(args.kernels, cfg, view)
    with open(args.markdown, "w", encoding="utf-8") as f:
        f.write(report.to_markdown(record) + "\n")
    data = record.to_dict()
    data["benchmark"] = "mutation_campaign"
    data["command"] = "python benchmarks/campaign.py " + " ".join(sys.argv[1:])
    data["machine"].update(machine())
    data["budget_seconds"] = BUDGET_SECONDS
    data["within_budget"] = record.seconds <= BUDGET_SECONDS
    data["load_average"] = [round(x, 2) for x in os.getloadavg()]
    data["markdown"] = os.path.abspath(args.markdown)
    if not args.full_json:
        for k in data["kernels"]:
            k["mutants"] = [{key: m[key] for key in ("id", "status", "sanitizer", "lint", "output_first",
                                                     "output_fails", "output_launches", "equivalence",
                                                     "not_sync_bug", "missed_sync", "survivor_class")}
                            | {"rules": [r["code"] for r in m["rules"]], "lint_rules": [r["code"] for r in m["lint_rules"]]}
                            for m in k["mutants"]]
        data.pop("mutants")  # the flat list repeats the rows above
    print(json.dumps(report.portable(data), indent=2))
    return 0 if record.ok else 2


def _table(paths: list[str]) -> str:
    """One summary table over several campaign JSONs (the wall time of the 'all' row is the
    sum of the runs' wall times)."""
    from ldssan.mutate import report
    from ldssan.mutate.campaign import label_kernels
    from ldssan.mutate.records import record_from_dict

    records = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            records.append(record_from_dict(json.load(f)))
    merged = records[0]
    for r in records[1:]:
        merged.kernels += r.kernels
        merged.seconds += r.seconds
    label_kernels(merged.kernels)
    return report.summary_markdown(merged)


if __name__ == "__main__":
    sys.exit(main())

"""Mutation campaigns: inject one-line LDS synchronization bugs into a FlyDSL kernel and
score the sanitizer (one launch) against an output check (K launches).

    ldssan mutate ldssan.kernels.rmsnorm                 # or a path to your kernel file
    ldssan mutate my_kernel.py --dry-run                 # every candidate site
    ldssan mutate ldssan.kernels.rmsnorm --json out.json --markdown out.md

A kernel opts in with `ldssan_cases() -> list[Case]` (the campaign protocol, documented in
`ldssan.mutate.target`), or is given a pytest test (`--pytest`); the bundled kernels are
registered in `ldssan.kernels.campaigns`, FlyDSL's coop primitives in `ldssan.mutate.coop`.

| module | holds |
|---|---|
| `source` | what operators know about a kernel file (device code, sync calls, LDS names) |
| `operators` | the operator registry and `find_mutants` |
| `target` | the protocol (`Case`) and kernel lookup |
| `worker` | one variant in a worker: sanitized launch, IR identity, K output checks |
| `campaign` | planning, the clean-baseline gate, the engine loop, classification, resume |
| `engines` | where tasks run: the engine interface and local worker processes |
| `dask_engine` | `--cluster local:N / tcp://HOST:PORT` on dask.distributed (optional dependency) |
| `store` | the JSON-lines result store (`--store`, `--resume`) |
| `equivalence` | equivalent-by-construction diffs (only strengthen sync) and survivor reasons |
| `syncbug` | "not a sync bug": output-only kills with no race, the clean sync skeleton, a fixed wrong output; survivor classes |
| `reliance` | which conflicting cross-wave LDS pairs each barrier orders (a probe of the clean launches), the independent race check |
| `pytest_case` | `--pytest FILE::TEST`: a pytest test's launches as the case, its assertions as the check |
| `coop` | cases for FlyDSL's coop primitives (`flydsl.extension.coop.*`) |
| `records` | the result records and counting rules (Wilson intervals) |
| `report` | JSON, Markdown and the rich live view |
| `cli` | `ldssan mutate` |

Importing this package does not import FlyDSL (workers do).
"""

from .campaign import CampaignConfig, run_campaign
from .operators import OPERATORS, Mutant, Operator, find_mutants, operator
from .source import protocol_lines
from .target import Case, Target, register_cases

__all__ = ["OPERATORS", "Case", "CampaignConfig", "Mutant", "Operator", "Target", "find_mutants", "operator",
           "protocol_lines", "register_cases", "run_campaign"]


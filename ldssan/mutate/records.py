"""Campaign records: plain data first (JSON-ready), formatting in `report.py`.

Counting rules (as mutation-testing harnesses count; docs/bug-patterns.md):

* a mutant that does not compile, hangs/crashes or times out, and one whose instrumented IR
  equals the clean kernel's, is *classified*, not counted: the rates are over the mutants
  that ran (`counted`);
* a sanitizer kill is at least one runtime violation on its one sanitized launch per case;
* a lint kill is a static fence-pairing finding (LDS040/LDS041) the clean kernel does not
  have; it is counted apart from runtime kills (`killed_by_lint`) and makes the status
  `killed`;
* equivalent mutants are equivalent *by construction* (`equivalence.py`): identical
  instrumented IR, or a survivor whose diff only strengthens synchronization;
* an output kill is a launch whose output fails the case's check; a launch that raises is
  not a kill (a crash or timeout is never a detection);
* "one launch" is the first policy of the output-check schedule (one launch per case);
  "K launches" is any failure over the whole schedule;
* rates carry Wilson 95% score intervals.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

# mutant status -> counted in the rates?
STATUSES = {
    "killed": True,  # killed by the sanitizer and/or the output check
    "survived": True,  # ran; neither the sanitizer nor the output check noticed
    "equivalent": False,  # equivalent by construction: identical IR, or only strengthens sync
    "not-compiled": False,  # the edited module does not import / trace / compile
    "hang": False,  # the emulator found every wave blocked (a hang on hardware)
    "crashed": False,  # the sanitized launch raised
    "timeout": False,  # no result within the per-mutant deadline
    "not-run": False,  # its kernel's clean baseline failed the gate
}

# The JSON `status` vocabulary (issue #17) -> the statuses above it covers; `detail` keeps ours.
PUBLIC_STATUS = {"killed": "killed", "survived": "survived", "equivalent": "equivalent",
                 "not-compiled": "not_compiled", "hang": "crash", "crashed": "crash", "timeout": "timeout",
                 "not-run": "not_run", "pending": "pending"}

HANG_ERRORS = ("DeadlockError", "BarrierDivergenceError", "SpinTimeout", "StepBudgetExceeded", "EmulationTimeout")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials (0, 1 when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    k: int
    n: int

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.k, self.n)

    def to_dict(self) -> dict:
        lo, hi = self.interval
        return {"k": self.k, "n": self.n, "rate": round(self.k / self.n, 4) if self.n else None,
                "wilson95": [round(lo, 4), round(hi, 4)]}


@dataclass
class MutantRecord:
    id: str
    operator: str
    line: int
    diff: str
    note: str
    edits: list[dict]
    status: str = "pending"
    sanitizer: bool | None = None  # violations on the sanitized launch(es)
    rules: list[dict] = field(default_factory=list)  # distinct (code, line, other_line)
    output_first: bool | None = None  # a check failed at the first policy
    output_fails: int = 0  # failed checks over the schedule
    output_errors: int = 0  # launches that raised
    output_launches: int = 0
    first_fail_policy: str | None = None
    seconds: float = 0.0
    error: str = ""
    lint: bool | None = None  # a lint finding the clean kernel does not have
    lint_rules: list[dict] = field(default_factory=list)  # those findings, distinct
    equivalence: str = ""  # why it is equivalent by construction
    reason: str = ""  # a survivor: why no rule saw it
    not_sync_bug: str = ""  # an output-only kill that is a value change, not a sync bug (syncbug.py)
    missed_sync: str = ""  # an output-only kill the sanitizer should catch: the failed condition
    survivor_class: str = ""  # a survivor explained: "no-sync-change" | "sync-redundant" (syncbug.py)

    @property
    def counted(self) -> bool:
        return STATUSES.get(self.status, False)

    @property
    def output_any(self) -> bool:
        return self.output_fails > 0

    def to_dict(self) -> dict:
        return asdict(self)

    def public(self, kernel: "KernelRecord") -> dict:
        """The flat per-mutant entry of the JSON's top-level `mutants` list."""
        first = (self.rules or self.lint_rules or [None])[0]
        return {"kernel": kernel.name, "kernel_digest": kernel.digest, "id": self.id, "operator": self.operator,
                "line": self.line, "status": PUBLIC_STATUS.get(self.status, self.status), "detail": self.status,
                "sanitizer_killed": self.sanitizer, "lint_killed": self.lint,
                "output_killed_1": self.output_first,
                "output_killed_k": self.output_any if self.output_first is not None else None,
                "rule": None if first is None else f"{first['code']} {first['name']}",
                "rules": [r["code"] for r in self.rules], "lint_rules": [r["code"] for r in self.lint_rules],
                "diff": one_line_diff(self.edits), "equivalence": self.equivalence, "reason": self.reason,
                "not_sync_bug": bool(self.not_sync_bug), "missed_sync_bug": bool(self.missed_sync),
                "survivor_class": self.survivor_class,
                "seconds": self.seconds, "error": self.error}


def one_line_diff(edits: list[dict]) -> str:
    """`L12: old -> new`, `L12: old deleted`, or `L12-13: old moved below new`."""
    if len(edits) == 1:
        e = edits[0]
        if e["after"].startswith("pass  # ldssan variant: deleted"):
            return f"L{e['line']}: {e['before']} deleted"
        return f"L{e['line']}: {e['before']} -> {e['after']}"
    a, b = edits[0], edits[1]
    return f"L{a['line']}-{b['line']}: {a['before']} moved below {b['before']}"


@dataclass
class KernelRecord:
    kernel: str  # as given
    name: str
    path: str = ""
    digest: str = ""  # sha256 of the kernel file (the store's key)
    status: str = "pending"  # ran | skipped | baseline-failed | no-mutants
    message: str = ""
    cases: list[str] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    baseline: dict = field(default_factory=dict)
    mutants: list[MutantRecord] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict:
        return summarize(self.mutants, self.seconds)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["summary"] = self.summary()
        return d


@dataclass
class CampaignRecord:
    kernels: list[KernelRecord]
    config: dict
    seconds: float = 0.0
    machine: dict = field(default_factory=dict)
    engine: dict = field(default_factory=lambda: {"name": "local", "workers": 1})
    resumed: int = 0  # mutant results taken from the store instead of run
    interrupted: str = ""  # the signal that stopped the campaign early (the record is partial)

    @property
    def ok(self) -> bool:
        """False if a clean baseline failed its gate (the campaign's finding)."""
        return not any(k.status == "baseline-failed" for k in self.kernels)

    def summary(self) -> dict:
        """Over the kernels that passed their baseline gate."""
        ran = [m for k in self.kernels if k.status in ("ran", "no-mutants") for m in k.mutants]
        return summarize(ran, self.seconds)

    def to_dict(self) -> dict:
        return {"campaign": "ldssan mutate", "ok": self.ok, "config": self.config, "machine": self.machine,
                "engine": self.engine, "resumed": self.resumed, "seconds": round(self.seconds, 2),
                **({"partial": True, "interrupted": self.interrupted} if self.interrupted else {}),
                "summary": self.summary(), "kernels": [k.to_dict() for k in self.kernels],
                "mutants": [m.public(k) for k in self.kernels for m in k.mutants]}

    def finished(self) -> tuple[int, int]:
        """(mutants with a result, mutants planned) over the kernels that were run."""
        planned = [m for k in self.kernels if k.status != "skipped" for m in k.mutants]
        return sum(1 for m in planned if m.status != "pending"), len(planned)


_MUTANT_KEYS = set(MutantRecord.__dataclass_fields__)
_KERNEL_KEYS = set(KernelRecord.__dataclass_fields__) - {"mutants"}


def record_from_dict(data: dict) -> CampaignRecord:
    """A campaign record back from its `--json` (full rows: `benchmarks/campaign.py
    --full-json`), e.g. to regenerate a table; keys a later version added are ignored."""
    kernels = []
    for k in data["kernels"]:
        rec = KernelRecord(**{key: v for key, v in k.items() if key in _KERNEL_KEYS})
        rec.mutants = [MutantRecord(**{key: v for key, v in m.items() if key in _MUTANT_KEYS}) for m in k["mutants"]]
        kernels.append(rec)
    return CampaignRecord(kernels, data["config"], data.get("seconds", 0.0), data.get("machine", {}),
                          data.get("engine", {"name": "local", "workers": 1}), data.get("resumed", 0),
                          data.get("interrupted", ""))


def summarize(mutants: list[MutantRecord], seconds: float) -> dict:
    counted = [m for m in mutants if m.counted]
    n = len(counted)
    sync = [m for m in counted if not m.not_sync_bug and m.survivor_class != "no-sync-change"]
    by_status = {s: sum(1 for m in mutants if m.status == s) for s in STATUSES}
    return {
        "mutants": len(mutants),
        "counted": n,
        "killed_by_sanitizer": Rate(sum(1 for m in counted if m.sanitizer), n).to_dict(),
        "killed_by_output_1": Rate(sum(1 for m in counted if m.output_first), n).to_dict(),
        "killed_by_output_k": Rate(sum(1 for m in counted if m.output_any), n).to_dict(),
        "killed_by_either": Rate(sum(1 for m in counted if m.sanitizer or m.output_any), n).to_dict(),
        "killed_by_lint": Rate(sum(1 for m in counted if m.lint), n).to_dict(),
        "killed_by_sanitizer_or_lint": Rate(sum(1 for m in counted if m.sanitizer or m.lint), n).to_dict(),
        "not_sync_bug": sum(1 for m in counted if m.not_sync_bug),
        "missed_sync_bug": sum(1 for m in counted if m.missed_sync),
        "no_sync_change": sum(1 for m in counted if m.survivor_class == "no-sync-change"),
        "sync_redundant": sum(1 for m in counted if m.survivor_class == "sync-redundant"),
        # the sanitizer's target: every counted mutant that changes synchronization (not the
        # value changes the output check kills, nor the survivors that keep every ordering)
        "killed_by_sanitizer_or_lint_sync": Rate(sum(1 for m in sync if m.sanitizer or m.lint), len(sync)).to_dict(),
        # ... and of those, killed or shown redundant on the cases run (reliance table)
        "explained_sync": Rate(sum(1 for m in sync if m.sanitizer or m.lint or m.survivor_class), len(sync)).to_dict(),
        "unexplained": sum(1 for m in counted if m.missed_sync or (m.status == "survived" and not m.survivor_class)),
        "sanitizer_only": sum(1 for m in counted if m.sanitizer and not m.output_any),
        "output_only": sum(1 for m in counted if m.output_any and not m.sanitizer),
        "lint_only": sum(1 for m in counted if m.lint and not m.sanitizer and not m.output_any),
        "survived": by_status["survived"],
        "equivalent": by_status["equivalent"],
        "equivalent_ir": sum(1 for m in mutants if m.status == "equivalent" and not m.equivalence.startswith("strengthens")),
        "equivalent_strengthening": sum(1 for m in mutants if m.equivalence.startswith("strengthens")),
        "not_compiled": by_status["not-compiled"],
        "hang": by_status["hang"],
        "crashed": by_status["crashed"],
        "timeout": by_status["timeout"],
        "seconds": round(seconds, 2),
    }


def distinct_rules(violations: list[dict]) -> list[dict]:
    """One entry per (code, line, other line), in first-seen order."""
    seen, out = set(), []
    for v in violations:
        key = (v["code"], v["line"], v.get("other_line"))
        if key not in seen:
            seen.add(key)
            out.append({"code": v["code"], "name": v["name"], "line": v["line"], "other_line": v.get("other_line"),
                        "message": v.get("message", "")})
    return out

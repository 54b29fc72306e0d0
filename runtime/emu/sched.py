"""The scheduler: runs the waves of a (batch of) workgroup(s) under a chosen policy.

Waves are generators; they yield at barriers, counter waits and copy issues. At every
yield the policy picks the next wave to advance (`round-robin`, `reverse`, `random(seed)`)
and, for in-flight async/TDM copies, when they land (`late`: at the forcing wait,
`early`: at issue, `random`: at a random point before the forcing wait). The happens-before
verdict never depends on these choices; only the values a racy kernel computes do.

Every loop is bounded: a wave that never reaches a barrier others wait at is a deadlock
error naming each wave's position; a runaway kernel exhausts the step budget or the time
limit (`wave.Budget`), an error naming the loop and each wave's position.

Without a sanitizer attached, a barrier misuse the happens-before engine would report as
LDS020 (a barrier under a partial exec mask, waves meeting at one barrier phase from
different barrier ops, a second signal before the wait) is a
`BarrierDivergenceError`: on hardware it hangs or skews the phases. Under the sanitizer
the engine reports it and the run goes on.

Cluster barrier (-3; AMDGPU execution-synchronization docs, GFX12 barrier table): one
barrier object per cluster whose expected count is the cluster's number of workgroups;
only one wave per workgroup may arrive (`s_barrier_signal -3`), on behalf of its
workgroup, and any wave of the cluster may wait. Modeled as: phase k completes when every
workgroup of the cluster has arrived k+1 times; a wave's (k+1)-th `s_barrier_wait -3`
returns once phase k is complete, whether or not that wave signalled (FlyDSL's
`cluster_barrier()`: a workgroup barrier, wave 0 signals, every wave waits). A second
arrival of one workgroup within a phase is a `BarrierDivergenceError` in every mode (the
happens-before engine does not model cluster phases). A workgroup that ends does not drop
the cluster barrier (the docs drop only joined barriers, and a cluster barrier has no
join), so waiting for a workgroup that has ended is a deadlock report.
"""

from __future__ import annotations

import inspect
import random
import re
from dataclasses import dataclass, field

import numpy as np

from ldssan.passes.ir.errors import LdssanError
from .wave import NullHooks, StepBudgetExceeded, WaveCtx

ASYNC = ("late", "early", "random")
CLUSTER_BARRIER = -3  # s_barrier_signal / s_barrier_wait id of the cluster user barrier


class DeadlockError(LdssanError, RuntimeError):
    pass


class SpinTimeout(DeadlockError):
    """Waves kept spinning (loop iterations with no other progress) past the spin budget."""


SPIN_LIMIT = 200_000
CLOCK_EVERY = 1024  # scheduler steps between two looks at the time limit


class BarrierDivergenceError(DeadlockError):
    """Waves of a workgroup ran different barrier sequences, or a barrier ran under a
    partial exec mask (plain emulation; the sanitizer reports these as LDS020)."""


class BatchDivergence(LdssanError, RuntimeError):
    """Batched workgroups took different paths at a barrier; rerun them one at a time."""


@dataclass(frozen=True)
class Policy:
    """Wave order, and when copies and ds stores land.

    `late`: copies at their covering wait; ds stores at the wave's next dscnt wait, fence,
    fenced barrier or LDS load (the most adversarial legal timing). `early`: both at issue.
    `random`: at random points in between.

    `lockstep`: the waves of a workgroup run as one lane array (`wave.LockstepCtx`), stores
    and copies landing at issue; a kernel that cannot run so (`uniformity.lockstep_refusal`)
    runs under `per_wave`.

    `canonical`: always advances the ready wave with the lowest (half-phase, wave index), so
    the kernel executes in the happens-before engine's canonical order (MODEL.md section 5:
    seg, wave, program order). Whatever sees accesses in execution order -- the device
    runtime's shadow -- then meets them in the order the Python engine applies them. A wave
    that spins yields to the others, as under every policy."""

    order: str = "round-robin"
    seed: int = 0
    async_completion: str = "late"

    @property
    def delays_ds_stores(self) -> bool:
        return self.async_completion != "early"

    @property
    def lockstep(self) -> bool:
        return self.order == "lockstep"

    @property
    def per_wave(self) -> "Policy":
        """The per-wave policy a lockstep launch falls back to (the policy itself otherwise)."""
        return Policy() if self.lockstep else self

    @classmethod
    def parse(cls, text: str) -> "Policy":
        """`round-robin`, `reverse`, `random(7)`, optionally `+late|early|random` (e.g. `random(3)+early`)."""
        text = text.strip()
        if text == "lockstep":
            return cls("lockstep", 0, "early")
        order, _, comp = text.partition("+")
        comp = comp or "late"
        m = re.fullmatch(r"(round-robin|rr|reverse|canonical|random)(?:\((\d+)\))?", order.strip())
        if not m or comp not in ASYNC:
            raise ValueError(
                f"unknown scheduler policy {text!r}: use round-robin, reverse, canonical or random(SEED), "
                f"optionally followed by +late, +early or +random; or lockstep")
        name = "round-robin" if m.group(1) == "rr" else m.group(1)
        return cls(name, int(m.group(2) or 0), comp)

    def __str__(self) -> str:
        if self.lockstep:
            return "lockstep"
        order = f"random({self.seed})" if self.order == "random" else self.order
        return order if self.async_completion == "late" else f"{order}+{self.async_completion}"


# Output checks (campaigns, `ldssan rows`) draw their schedules from OUTPUT_POLICIES (their
# recorded results name these); tests of "every policy" use ALL_POLICIES.
OUTPUT_POLICIES = (Policy("round-robin"), Policy("reverse"), Policy("random", 1), Policy("random", 2),
                   Policy("round-robin", 0, "early"), Policy("random", 3, "random"))
ALL_POLICIES = (*OUTPUT_POLICIES, Policy("canonical"))


@dataclass
class _Barrier:
    phase: int = 0
    arrived: set = field(default_factory=set)
    first: tuple | None = None  # (wave, generated line) of the phase's first signal


class Scheduler:
    def __init__(self, program, waves: list[WaveCtx], args, policy: Policy, *, on_wave_end=None):
        self.program = program
        self.waves = waves
        self.gens = [program.wave_fn(w, args) for w in waves]
        self.policy = policy
        self.rng = random.Random(policy.seed)
        self.live = set(range(len(waves)))
        self.ready = list(range(len(waves)))
        # Several workgroups ("teams") may be resident at once; barriers are per team.
        self.team_live: dict[int, set] = {}
        for i, w in enumerate(waves):
            self.team_live.setdefault(w.team, set()).add(i)
        self.blocked: dict[int, tuple[tuple, int]] = {}  # wave -> ((team, barrier id), phase awaited)
        self.awaiting: dict[tuple[int, tuple], int] = {}  # (wave, key) -> phase it signalled in
        self.barriers: dict[tuple, _Barrier] = {}
        # cluster barriers: cluster -> the teams (workgroups) in it; arrivals are teams
        self.cluster_teams: dict[int, set] = {}
        for w in waves:
            if w.cluster is not None:
                self.cluster_teams.setdefault(w.cluster, set()).add(w.team)
        self.cluster_barriers: dict[int, _Barrier] = {}
        self.cluster_waits: dict[int, int] = {}  # wave -> its s_barrier_wait -3 so far
        self.spins = 0
        self.cursor = -1
        # canonical order: each wave's half-phase (2 * returned waits, +1 in a signal-wait
        # window of the workgroup barrier, as the engine's `seg`) and the waves that last spun
        # (kept only under that policy: the step loop is hot)
        self.canonical = policy.order == "canonical"
        self.seg = [0] * len(waves)
        self.spun: dict[int, int] = {}  # wave -> the step it last spun at (since any progress)
        self.on_wave_end = on_wave_end
        self.steps = 0
        self.budget = waves[0].budget if waves else None
        self.raised: tuple | None = None  # (wave, op text) of a wave whose generator raised
        # plain emulation: barrier misuse is an error here (the sanitizer's engine reports it)
        self.strict = all(type(w.san) is NullHooks for w in waves)

    # -- policy ----------------------------------------------------------------------------
    def _pick(self) -> int:
        ready = self.ready
        if self.policy.order == "random":
            return ready[self.rng.randrange(len(ready))]
        if self.canonical:
            pool = [w for w in ready if w not in self.spun]
            if not pool:  # every ready wave spins: the one that spun longest ago goes next
                return min(ready, key=self.spun.__getitem__)
            return min(pool, key=lambda w: (self.seg[w], w))
        n = len(self.waves)
        step = -1 if self.policy.order == "reverse" else 1
        start = self.cursor if self.cursor >= 0 else (n if step < 0 else -1)
        for k in range(1, n + 1):
            w = (start + step * k) % n
            if w in ready:
                self.cursor = w
                return w
        raise AssertionError("no ready wave")

    # -- barrier bookkeeping ---------------------------------------------------------------------
    def _key(self, w: int, bid: int) -> tuple:
        return (self.waves[w].team, bid)

    def _barrier(self, key: tuple) -> _Barrier:
        b = self.barriers.get(key)
        if b is None:  # not setdefault: that builds a _Barrier on every call (hot path)
            b = self.barriers[key] = _Barrier()
        return b

    def _signal(self, w: int, bid: int) -> None:
        key = self._key(w, bid)
        b = self._barrier(key)
        mine = (w, key)
        if self.strict:
            self._check_sequence(w, mine, b)
        b.arrived.add(w)
        self.awaiting[mine] = b.phase
        self._maybe_complete(key)

    def _maybe_complete(self, key: tuple) -> None:
        b = self._barrier(key)
        if b.arrived and self.team_live[key[0]] <= b.arrived:
            self._complete(key, b)

    def _complete(self, key: tuple, b: _Barrier) -> None:
        b.phase += 1
        b.arrived.clear()
        b.first = None
        for w, (wk, ph) in list(self.blocked.items()):
            if wk == key and ph < b.phase:
                del self.blocked[w]
                self.ready.append(w)

    # -- cluster barrier (-3): see the module docstring ----------------------------------------
    def _cluster_barrier(self, w: int) -> tuple[tuple, _Barrier]:
        c = self.waves[w].cluster
        b = self.cluster_barriers.get(c)
        if b is None:
            b = self.cluster_barriers[c] = _Barrier()
        return ("cluster", c), b

    def _cluster_signal(self, w: int) -> None:
        key, b = self._cluster_barrier(w)
        team = self.waves[w].team
        if team in b.arrived:
            raise BarrierDivergenceError(self._divergence_message(
                w, f"signals the cluster barrier (-3) in {self.position(w)}, but its workgroup already "
                f"arrived in phase {b.phase} (only one wave per workgroup may arrive at a cluster barrier, "
                "on behalf of its workgroup)"))
        b.arrived.add(team)
        if self.cluster_teams[key[1]] <= b.arrived:
            self._complete(key, b)

    def _cluster_wait(self, w: int) -> None:
        key, b = self._cluster_barrier(w)
        n = self.cluster_waits.get(w, 0)
        self.cluster_waits[w] = n + 1
        if n < b.phase:
            return  # the phase this wait belongs to is already complete
        self.ready.remove(w)
        self.blocked[w] = (key, n)

    def _wait(self, w: int, bid: int) -> None:
        key = self._key(w, bid)
        b = self._barrier(key)
        ph = self.awaiting.pop((w, key), b.phase)  # a wait with no signal: a deadlock, reported
        if ph < b.phase:
            return  # phase already complete
        self.ready.remove(w)
        self.blocked[w] = (key, ph)

    # -- the run loop -------------------------------------------------------------------------------
    def run(self) -> None:
        # IEEE specials (inf, nan, wrap-around) are the kernel's business, not numpy warnings
        with np.errstate(all="ignore"):
            while self.live:
                if not self.ready:
                    raise DeadlockError(self._deadlock_message())
                w = self._pick()
                self._step(w)

    def _step(self, w: int) -> None:
        ctx = self.waves[w]
        if self.policy.async_completion == "random":
            self._random_completions(ctx)
        try:
            ev = next(self.gens[w])
        except StopIteration:
            self._end(w)
            return
        except StepBudgetExceeded as exc:
            raise type(exc)(self._budget_message(exc, w)) from None
        except Exception as exc:
            err = self._annotate(exc, w)
            if err is exc:
                raise
            raise err from exc
        self.steps += 1
        if not self.steps % CLOCK_EVERY and self.budget is not None:
            try:
                self.budget.check()
            except StepBudgetExceeded as exc:
                raise type(exc)(self._budget_message(exc, None)) from None
        kind = ev[0]
        if kind == "spin":
            if self.canonical:
                self.spun[w] = self.steps
            self.spins += 1
            if self.spins > SPIN_LIMIT:
                raise SpinTimeout(self._deadlock_message(
                    f"ldssan-emu: spin budget exhausted — {SPIN_LIMIT} loop iterations with no other "
                    "progress (a spin-wait that never ends):"))
            return
        self.spins = 0
        if self.canonical:
            self.spun.clear()
            if kind in ("barrier", "signal", "wait") and ev[1] == -1:
                self.seg[w] += 2 if kind == "barrier" else 1
        if kind == "sync":
            return
        if kind == "barrier":
            ctx.flush_ds()  # gpu.barrier's release fence is s_wait_dscnt 0
            self._check_batch(ctx, ev[2])
            if self.strict and ev[2] is not ctx.mask:
                self._check_lanes(w, ev[2])
            self._signal(w, ev[1])
            self._wait(w, ev[1])
        elif kind == "signal":
            self._check_batch(ctx, ev[2])
            if self.strict and ev[2] is not ctx.mask:
                self._check_lanes(w, ev[2])
            if ev[1] == CLUSTER_BARRIER:
                self._cluster_signal(w)
            else:
                self._signal(w, ev[1])
        elif kind == "wait":
            if ev[1] == CLUSTER_BARRIER:
                self._cluster_wait(w)
            else:
                self._wait(w, ev[1])
        elif kind == "waitcnt":
            if ev[1] == "ds":
                ctx.flush_ds(ev[2])
            else:
                ctx.complete_until(ev[1], ev[2])
        elif kind == "wait_asyncmark":
            self._wait_asyncmark(ctx, ev[1])
        elif kind == "issue":
            if self.policy.async_completion == "early":
                ctx.complete_until(ev[1], 0)
        else:
            raise RuntimeError(f"ldssan-emu: unknown scheduler event {ev!r}")

    def _wait_asyncmark(self, ctx: WaveCtx, n: int) -> None:
        # Complete every copy issued before the oldest of the newest n marks.
        n &= 0xFFFF
        if len(ctx.marks) > n:
            upto = ctx.marks[len(ctx.marks) - n - 1]
            for q in ctx.pending.values():
                while q and q[0].seq < upto:
                    q.popleft().complete()
            del ctx.marks[: len(ctx.marks) - n]

    def _random_completions(self, ctx: WaveCtx) -> None:
        if ctx.ds_queue and self.rng.random() < 0.5:
            ctx.flush_ds(self.rng.randrange(len(ctx.ds_queue)))
        for q in ctx.pending.values():
            while q and self.rng.random() < 0.5:
                q.popleft().complete()

    def _check_batch(self, ctx: WaveCtx, mask) -> None:
        if ctx.L == 32 or ctx.lockstep:  # a lockstep batch's workgroups meet barriers apart (see _check_lanes)
            return
        active = np.asarray(mask).reshape(-1, 32).any(axis=1)
        if not (active == ctx.groups_active).all():
            raise BatchDivergence(f"wave {ctx.wave}: batched workgroups diverge at a barrier")

    # -- barrier misuse (plain emulation) ---------------------------------------------------------
    def _check_lanes(self, w: int, mask) -> None:
        """A barrier reached with some of the wave's lanes masked off (divergent control flow)."""
        ctx = self.waves[w]
        mask = np.asarray(mask)
        missing = ctx.mask & ~mask
        if ctx.lockstep and ctx.n_batched > 1:
            # a workgroup of a lockstep batch takes part in a barrier whole or not at all:
            # only the workgroups with a lane at it miss lanes
            per = ctx.L // ctx.n_batched
            took = (ctx.mask & np.broadcast_to(mask, ctx.mask.shape)).reshape(ctx.n_batched, per).any(axis=1)
            missing = missing & np.repeat(took, per)
        if not missing.any():
            return
        lo = int(np.flatnonzero(missing)[0]) // 32 * 32  # the first batched workgroup affected
        group = slice(lo, lo + 32)
        here = np.flatnonzero(mask[group] & ctx.mask[group])
        gone = np.flatnonzero(missing[group])
        where = ""
        if ctx.L > 32:
            where = f" (workgroup {tuple(int(np.asarray(b).reshape(-1)[lo]) for b in ctx.bid)})"
        raise BarrierDivergenceError(self._divergence_message(
            w, f"reaches {self.position(w)} under a partial exec mask{where}: lanes {_ranges(here)} "
            f"at the barrier, lanes {_ranges(gone)} not (a barrier in divergent control flow)"))

    def _check_sequence(self, w: int, mine: tuple, b: _Barrier) -> None:
        """Every wave signals phase k from the same barrier op, once (the engine's LDS020)."""
        if mine in self.awaiting:
            raise BarrierDivergenceError(self._divergence_message(
                w, f"signals barrier {mine[1][1]} again in {self.position(w)} before waiting for its "
                f"signal of phase {self.awaiting[mine]}"))
        line = self.gens[w].gi_frame.f_lineno
        first = b.first
        if first is None:
            b.first = (w, line)
            return
        other, other_line = first
        if other_line != line:
            raise BarrierDivergenceError(self._divergence_message(
                w, f"meets barrier phase {b.phase} in {self._op_text(line)}, but {self._name(other)} "
                f"met it in {self._op_text(other_line)} (different barrier sequences)"))

    def _op_text(self, line: int) -> str:
        at = self.program.op_at(line)
        return f"'{at[0]}' at {at[1]}" if at else f"line {line} of the translated kernel"

    def _divergence_message(self, w: int, what: str) -> str:
        head = f"ldssan-emu: barrier divergence in kernel {self.program.name} — {self._name(w)} {what}:"
        return self._deadlock_message(head)

    def _end(self, w: int) -> None:
        ctx = self.waves[w]
        ctx.drain()
        self.live.discard(w)
        self.team_live[ctx.team].discard(w)
        self.ready.remove(w)
        self.spins = 0
        if self.on_wave_end is not None:
            self.on_wave_end(ctx)
        for key in list(self.barriers):
            if key[0] == ctx.team:
                self._maybe_complete(key)

    # -- diagnostics ----------------------------------------------------------------------------
    def position(self, w: int) -> str:
        gen = self.gens[w]
        if gen.gi_frame is None:
            return "finished"
        if inspect.getgeneratorstate(gen) == inspect.GEN_CREATED:
            return "its first op (not started yet)"
        frame = gen.gi_frame
        return self._op_text(frame.f_lineno)

    def _name(self, w: int) -> str:
        ctx = self.waves[w]
        teams = len(self.team_live) > 1
        wave = f"waves 0-{ctx.n_waves - 1} (lockstep)" if getattr(ctx, "lockstep", False) else f"wave {ctx.wave}"
        return f"workgroup {ctx.team} {wave}" if teams else wave

    def _deadlock_message(self, head: str = "ldssan-emu: deadlock — every live wave is blocked:") -> str:
        lines = [head]
        for w in sorted(self.live):
            key, ph = self.blocked.get(w, (None, None))
            what = "running" if key is None else f"waiting at barrier {key[1]} (phase {ph})"
            if key is not None and key[0] == "cluster":
                what = f"waiting at the cluster barrier -3 of cluster {key[1]} (phase {ph})"
            where = self.raised[1] if self.raised and self.raised[0] == w else self.position(w)
            lines.append(f"  {self._name(w)}: {what} in {where}")
        done = sorted(set(range(len(self.waves))) - self.live)
        if done:
            lines.append(f"  finished waves: {[self._name(w) for w in done]}")
        for (team, bid), b in self.barriers.items():
            live = sorted(self.waves[w].wave for w in self.team_live[team])
            arrived = sorted(self.waves[w].wave for w in b.arrived)
            where = f"workgroup {team} " if len(self.team_live) > 1 else ""
            lines.append(f"  {where}barrier {bid}: phase {b.phase}, arrived {arrived} of live {live}")
        for c, b in self.cluster_barriers.items():
            lines.append(f"  cluster {c} barrier -3: phase {b.phase}, workgroups arrived {sorted(b.arrived)} "
                         f"of {sorted(self.cluster_teams[c])}")
        return "\n".join(lines)

    def _raised_at(self, exc: Exception) -> str | None:
        """The op of the kernel whose generated line raised `exc` (innermost), if any."""
        tb = exc.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.program.filename:
                line = tb.tb_lineno
            tb = tb.tb_next
        return self._op_text(line) if line is not None else None

    def _annotate(self, exc: Exception, w: int) -> Exception:
        """`exc` from wave `w`'s code as the error to raise: an ldssan error naming the op."""
        return self.program.failure(exc, f"wave {w}", self.position(w))

    def _budget_message(self, exc: StepBudgetExceeded, w: int | None) -> str:
        """The budget error with the loop that ran it out and every wave's position."""
        head = f"{exc}\n  in kernel {self.program.name}"
        if w is not None:
            where = self._raised_at(exc) or "an unknown op"
            head += f", {self._name(w)} running the loop {where}"
            self.raised = (w, where)
        return self._deadlock_message(head + "; waves:")


def _ranges(lanes) -> str:
    """`0-15, 20` for a sorted array of lane numbers."""
    out, start, prev = [], None, None
    for x in (int(v) for v in lanes):
        if start is None:
            start = prev = x
        elif x == prev + 1:
            prev = x
        else:
            out.append(f"{start}-{prev}" if prev > start else f"{start}")
            start = prev = x
    if start is not None:
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
    return ", ".join(out)

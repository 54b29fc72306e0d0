"""The scheduler: runs the waves of a (batch of) workgroup(s) under a chosen policy.

Waves are generators; they yield at barriers, counter waits and copy issues. At every
yield the policy picks the next wave to advance (`round-robin`, `reverse`, `random(seed)`)
and, for in-flight async/TDM copies, when they land (`late`: at the forcing wait,
`early`: at issue, `random`: at a random point before the forcing wait). The happens-before
verdict never depends on these choices; only the values a racy kernel computes do.

Every loop is bounded: a wave that never reaches a barrier others wait at is a deadlock
error naming each wave's position; a runaway kernel exhausts the step budget.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

from .wave import StepBudgetExceeded, WaveCtx

ORDERS = ("round-robin", "reverse", "random")
ASYNC = ("late", "early", "random")


class DeadlockError(RuntimeError):
    pass


class SpinTimeout(DeadlockError):
    """Waves kept spinning (loop iterations with no other progress) past the spin budget."""


SPIN_LIMIT = 200_000


class BatchDivergence(RuntimeError):
    """Batched workgroups took different paths at a barrier; rerun them one at a time."""


@dataclass(frozen=True)
class Policy:
    """Wave order, and when copies and ds stores land.

    `late`: copies at their covering wait; ds stores at the wave's next dscnt wait, fence,
    fenced barrier or LDS load (the most adversarial legal timing). `early`: both at issue.
    `random`: at random points in between."""

    order: str = "round-robin"
    seed: int = 0
    async_completion: str = "late"

    @property
    def delays_ds_stores(self) -> bool:
        return self.async_completion != "early"

    @classmethod
    def parse(cls, text: str) -> "Policy":
        """`round-robin`, `reverse`, `random(7)`, optionally `+late|early|random` (e.g. `random(3)+early`)."""
        text = text.strip()
        order, _, comp = text.partition("+")
        comp = comp or "late"
        m = re.fullmatch(r"(round-robin|rr|reverse|random)(?:\((\d+)\))?", order.strip())
        if not m or comp not in ASYNC:
            raise ValueError(
                f"unknown scheduler policy {text!r}: use round-robin, reverse or random(SEED), "
                f"optionally followed by +late, +early or +random")
        name = "round-robin" if m.group(1) == "rr" else m.group(1)
        return cls(name, int(m.group(2) or 0), comp)

    def __str__(self) -> str:
        order = f"random({self.seed})" if self.order == "random" else self.order
        return order if self.async_completion == "late" else f"{order}+{self.async_completion}"


ALL_POLICIES = (Policy("round-robin"), Policy("reverse"), Policy("random", 1), Policy("random", 2),
                Policy("round-robin", 0, "early"), Policy("random", 3, "random"))


@dataclass
class _Barrier:
    phase: int = 0
    arrived: set = field(default_factory=set)


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
        self.spins = 0
        self.cursor = -1
        self.on_wave_end = on_wave_end
        self.steps = 0

    # -- policy ----------------------------------------------------------------------------
    def _pick(self) -> int:
        ready = self.ready
        if self.policy.order == "random":
            return ready[self.rng.randrange(len(ready))]
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
        return self.barriers.setdefault(key, _Barrier())

    def _signal(self, w: int, bid: int) -> None:
        key = self._key(w, bid)
        b = self._barrier(key)
        b.arrived.add(w)
        self.awaiting[(w, key)] = b.phase
        self._maybe_complete(key)

    def _maybe_complete(self, key: tuple) -> None:
        b = self._barrier(key)
        if b.arrived and self.team_live[key[0]] <= b.arrived:
            b.phase += 1
            b.arrived.clear()
            for w, (wk, ph) in list(self.blocked.items()):
                if wk == key and ph < b.phase:
                    del self.blocked[w]
                    self.ready.append(w)

    def _wait(self, w: int, bid: int) -> None:
        key = self._key(w, bid)
        b = self._barrier(key)
        ph = self.awaiting.pop((w, key), b.phase)
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
        except Exception as exc:
            self._annotate(exc, w)
            raise
        self.steps += 1
        kind = ev[0]
        if kind == "spin":
            self.spins += 1
            if self.spins > SPIN_LIMIT:
                raise SpinTimeout(self._deadlock_message(
                    f"ldssan-emu: spin budget exhausted — {SPIN_LIMIT} loop iterations with no other "
                    "progress (a spin-wait that never ends):"))
            return
        self.spins = 0
        if kind == "sync":
            return
        if kind == "barrier":
            ctx.flush_ds()  # gpu.barrier's release fence is s_wait_dscnt 0
            self._check_batch(ctx, ev[2])
            self._signal(w, ev[1])
            self._wait(w, ev[1])
        elif kind == "signal":
            self._check_batch(ctx, ev[2])
            self._signal(w, ev[1])
        elif kind == "wait":
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
        if ctx.L == 32:
            return
        active = np.asarray(mask).reshape(-1, 32).any(axis=1)
        if not (active == ctx.groups_active).all():
            raise BatchDivergence(f"wave {ctx.wave}: batched workgroups diverge at a barrier")

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
        frame = self.gens[w].gi_frame
        if frame is None:
            return "finished"
        at = self.program.op_at(frame.f_lineno)
        return f"'{at[0]}' at {at[1]}" if at else f"line {frame.f_lineno} of the translated kernel"

    def _name(self, w: int) -> str:
        ctx = self.waves[w]
        teams = len(self.team_live) > 1
        return f"workgroup {ctx.team} wave {ctx.wave}" if teams else f"wave {ctx.wave}"

    def _deadlock_message(self, head: str = "ldssan-emu: deadlock — every live wave is blocked:") -> str:
        lines = [head]
        for w in sorted(self.live):
            key, ph = self.blocked.get(w, (None, None))
            what = f"waiting at barrier {key[1]} (phase {ph})" if key is not None else "running"
            lines.append(f"  {self._name(w)}: {what} in {self.position(w)}")
        done = sorted(set(range(len(self.waves))) - self.live)
        if done:
            lines.append(f"  finished waves: {[self._name(w) for w in done]}")
        for (team, bid), b in self.barriers.items():
            live = sorted(self.waves[w].wave for w in self.team_live[team])
            arrived = sorted(self.waves[w].wave for w in b.arrived)
            where = f"workgroup {team} " if len(self.team_live) > 1 else ""
            lines.append(f"  {where}barrier {bid}: phase {b.phase}, arrived {arrived} of live {live}")
        return "\n".join(lines)

    def _annotate(self, exc: Exception, w: int) -> None:
        tb = exc.__traceback__
        at = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.program.filename:
                at = self.program.op_at(tb.tb_lineno)
            tb = tb.tb_next
        where = f"'{at[0]}' at {at[1]}" if at else self.position(w)
        if isinstance(exc, StepBudgetExceeded) or hasattr(exc, "add_note"):
            exc.add_note(f"ldssan-emu: while running wave {w} of kernel {self.program.name}: {where}")

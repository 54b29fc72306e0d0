"""Run the device runtime on the virtual gfx1250: the proof without hardware.

`emulated(policy)` makes FlyDSL launches inside the block build the instrumented kernel,
link the device runtime into it (`link.py`) and run the linked IR as plain kernel code on
the virtual gfx1250 — no Python happens-before engine is involved: every shadow update,
check and record is the kernel's own LDS and global traffic, atomics included. The
records land in a global buffer with the ring header, read back as a validated `Ring`.
"""

from __future__ import annotations

import functools
import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from ..records import Record, RecordFormatError, Ring
from . import layout as L
from .settle import settle

DEFAULT_CAPACITY = 16384  # records the buffer holds (512 KiB)
# The emulator's runaway guard (CPU seconds per scheduler run), raised inside `emulated()`:
# the linked kernel does the shadow's work as kernel code, ~10-50x the plain kernel's ops.
DEVICE_TIME_LIMIT = 300.0


class RecordBuffer:
    """The process's device record buffer: a CPU tensor the kernel reaches by its address
    (baked into the linked IR, and into the build's cache key). Kept for the process's
    lifetime, so an address in a cached build never dangles. The launch descriptor
    (layout.DESC: where the global-scratch shadows are, the grid, the kernel's LDS) sits
    just before the ring, in the same allocation."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        import torch

        self.capacity = capacity
        self.whole = torch.zeros(L.DESC_BYTES + L.RECORDS_AT + capacity * 32, dtype=torch.uint8)
        self.tensor = self.whole[L.DESC_BYTES:]  # the ring
        self.addr = self.tensor.data_ptr()
        self.launch = 0
        self.slots = None  # the global-scratch shadows of the current launch (a CPU tensor)

    def bind_scratch(self, lay: L.ShadowLayout, grid, lds_bytes: int) -> None:
        """Before a launch whose shadow is in global scratch: one zeroed slot per workgroup
        of the grid, sized for the launch's LDS (static + dynamic), and the descriptor."""
        import torch

        gx, gy, gz = (int(g) for g in grid)
        words = lay.words_for(lds_bytes)
        n = gx * gy * gz
        if self.slots is None or self.slots.numel() < n * words:
            self.slots = torch.zeros(n * words, dtype=torch.int32)
        desc = L.DESC.pack(self.slots.data_ptr(), gx, gy, lds_bytes, words, n)
        self.whole[: L.DESC_BYTES].numpy()[:] = np.frombuffer(desc, np.uint8)

    def reset(self, capacity: int | None = None) -> None:
        cap = self.capacity if capacity is None else capacity
        if not 0 < cap <= self.capacity:
            raise ValueError(f"ldssan device runtime: capacity {cap} outside 1..{self.capacity}")
        self.whole.zero_()
        self._header(cap, 0, 0)

    def next_launch(self) -> int:
        """A launch id for the records of the next launch (the kernel reads it)."""
        self.launch += 1
        cap, written, dropped, _launch, _pad = L.RING_HEADER.unpack(self._raw(L.RECORDS_AT))
        self._header(cap, written, dropped)
        return self.launch

    def _header(self, cap: int, written: int, dropped: int) -> None:
        head = L.RING_HEADER.pack(cap, written, dropped, self.launch & 0xFFFFFFFF, 0)
        self.tensor[: L.RECORDS_AT].numpy()[:] = np.frombuffer(head, np.uint8)

    def _raw(self, n: int) -> bytes:
        return self.tensor[:n].numpy().tobytes()

    def ring(self) -> Ring:
        """The buffer as a validated `Ring` (header + kept records), `Ring.from_bytes`'s checks."""
        cap, written, dropped, _launch, _pad = L.RING_HEADER.unpack(self._raw(L.RECORDS_AT))
        if cap > self.capacity:
            raise RecordFormatError(f"ldssan device runtime: header capacity {cap} over the buffer's {self.capacity}")
        kept = min(written, cap)
        body = self.tensor[L.RECORDS_AT: L.RECORDS_AT + 32 * kept].numpy().tobytes()
        return Ring.from_bytes(Ring.HEADER.pack(cap, written, dropped) + body)


@functools.cache
def record_buffer() -> RecordBuffer:
    """The process's record buffer (kept: cached builds carry its address)."""
    return RecordBuffer()


def source_digest() -> str:
    """Hash of the device runtime's sources: editing them changes the build's cache key."""
    here = os.path.dirname(__file__)
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:12]


@dataclass
class DeviceRun:
    """What one `emulated()` block produced: the buffer and each launch's site table."""

    buffer: RecordBuffer
    config: object = None  # the block's EmuConfig: its `launches` give each launch's grid
    launches: list[tuple[int, str]] = field(default_factory=list)  # (launch id, site table JSON)
    starts: list[int] = field(default_factory=list)  # len(config.launches) when each began

    def ring(self) -> Ring:
        """The buffer as written (`workgroup` still the packed block id, layout.WG_*)."""
        return self.buffer.ring()

    def records(self) -> list[Record]:
        """Every record of the block: linear workgroup ids, settled (settle.py)."""
        grids = self._grids()
        out = [replace(r, workgroup=L.linear_workgroup(r.workgroup, grids.get(r.launch)))
               for r in self.ring().records()]
        return settle(out)

    def _grids(self) -> dict[int, tuple | None]:
        done = self.config.launches if self.config is not None else []
        out = {}
        for i, (launch, _sites) in enumerate(self.launches):
            end = self.starts[i + 1] if i + 1 < len(self.starts) else len(done)
            grids = {tuple(rec.grid) for rec in done[self.starts[i]:end]}
            for g in grids:
                if any(n > lim for n, lim in zip(g, L.WG_LIMITS)):
                    raise RecordFormatError(f"ldssan device runtime: grid {g} exceeds the packed workgroup id's "
                                            f"range {L.WG_LIMITS}")
            out[launch] = grids.pop() if len(grids) == 1 else None  # kernels of one call, different grids
        return out


def _device_pass(op, pass_=None, *, calls: bool = True) -> None:
    """The pass at the sentinel of a device build (`RunConfig.device`): instrument, then link
    (`calls`: the hooks defined once and called, the virtual gfx1250's form; a build for
    LLVM passes False: every hook inlined)."""
    from ldssan.passes.instrument import instrument_pass

    from ..emu import frontend
    from .link import DeviceLinkError, link

    cfg = frontend.current()
    dev = cfg.run.device if cfg is not None else None
    if dev is None:
        raise RuntimeError("ldssan device runtime: linked outside `emulated()` (no record buffer address)")
    instrument_pass(op, pass_)
    try:
        link(op, dev.ring_addr, scratch=dev.scratch, calls=calls)
    except DeviceLinkError as e:
        _LINK_FAILURES.append(e)  # FlyDSL re-raises a pass failure as its own error type
        raise


_LINK_FAILURES: list = []


class _Launches:
    """What the emulator's launcher sees as its sanitizer: no engine (the kernel checks
    itself) -- it only does the host launcher's part for each launch: bind the
    global-scratch shadows (grid and LDS size are known there) and let an out-of-range LDS
    access read as the hardware's (zeros), since the kernel reports it as LDS031."""

    def __init__(self, buf: RecordBuffer, view):
        import json

        layouts = json.loads(view.attrs.get("ldssan.device", "{}"))
        lays = [L.ShadowLayout(d["waves"], d["sites"], d["lds_bytes"], d["copies"], d["where"] != "lds")
                for d in layouts.values()]
        self.buf = buf
        self.lay = lays[0] if len(lays) == 1 and lays[0].scratch else None

    def begin_batch(self, prog, waves, chunk, grid, lds_bytes):
        if self.lay is not None:
            self.buf.bind_scratch(self.lay, grid, lds_bytes)
        for ctx in waves:
            ctx.lds_oob_ok = True
            # the hooks write the record buffer at its raw address (the emulator finds such
            # pointers only in a kernel's own body, and the called hooks are not kernels)
            ctx.gmem.reach_process = True
        return _no_end

    def end_batch(self) -> int:
        return 0

    def finish(self) -> None:
        pass


def _no_end(ctx) -> None:
    """The wave's end is the kernel's own (`__ldssan_end`, before gpu.return)."""


def device_policy(policy):
    """The scheduler policy a device-runtime run uses for `policy`. Lockstep becomes
    `canonical`: the hooks' uniform updates come from a wave's first active lane
    (`readfirstlane`), which a workgroup run as one lane array would share across waves,
    and in canonical order the device meets each access's partners as the engine does."""
    from ..emu.sched import Policy

    policy = Policy.parse(policy) if isinstance(policy, str) else policy
    return Policy("canonical") if policy.lockstep else policy


@contextmanager
def emulated(policy="canonical", *, capacity: int | None = None, resident: int = 1, scratch: bool = False,
             inline: bool = False):
    """FlyDSL launches inside the block run instrumented, with the device runtime linked
    in, on the virtual gfx1250 (`policy`: `device_policy`). Yields a `DeviceRun`; read
    `run.records()` after. `scratch` puts every shadow in global scratch (else only where
    LDS has no room). `inline` links every hook inline, as a build for LLVM is (slower to
    parse and translate; the default calls them: link.py)."""
    from ..emu import frontend
    from ..emu.runconfig import DeviceLink, RunConfig

    buf = record_buffer()
    buf.reset(capacity)
    run = DeviceRun(buf)

    def on_launch(sites_json, entry, view):
        # called before each launch: give it a launch id, keep its site table, and return
        # no engine -- the kernel checks itself
        run.launches.append((buf.next_launch(), sites_json))
        run.starts.append(len(cfg.launches))
        return _Launches(buf, view)

    # the link's form is part of the build's cache key (the digest goes into the sentinel)
    device = DeviceLink(source_digest() + ("-inline" if inline else ""), buf.addr, scratch=scratch)
    cfg = frontend.EmuConfig(RunConfig(policy=device_policy(policy), sanitize=True, resident=resident,
                                       time_limit=DEVICE_TIME_LIMIT, device=device),
                             sanitizer_factory=on_launch,
                             sentinel_pass=functools.partial(_device_pass, calls=not inline))
    run.config = cfg
    from .link import DeviceLinkError

    _LINK_FAILURES.clear()
    with frontend.active(cfg):
        try:
            yield run
        except Exception as exc:
            # a link refusal reaches the caller as DeviceLinkError, whatever FlyDSL wrapped it in
            if _LINK_FAILURES and not isinstance(exc, DeviceLinkError):
                raise _LINK_FAILURES.pop() from exc
            raise

"""FLYDSL_LDSSAN_DEVICE: the device runtime behind `FLYDSL_LDSSAN=1` and `hook.sanitize`.

`emulated` (the linked IR on the virtual gfx1250) reports through the same collector,
report and pytest failure as the Python engine, and the same violations for RMSNorm's
planted bugs. `hardware` needs a gfx1250 HIP device: without one it is a one-line error; with
the detection and FlyDSL's HIP seam faked (nothing here runs on a GPU), a launch is built with
the device ring's address baked in by FlyDSL's whole gfx1250 pipeline, handed to the seam
that would load and launch it, read back and decoded. The records the fake launch writes are
the device runtime's own, from an `emulated()` run of the same kernel.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace

import pytest
import torch

from ldssan import config, hook
from ldssan.isa.toolchain import build_env, patched_env
from ldssan.kernels import gemm as G
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.device import DeviceLinkError, emulated
from ldssan.runtime.device import hardware as hw
from ldssan.runtime.device import layout as L
from ldssan.runtime.device.session import outcome
from ldssan.runtime.emu import frontend
from ldssan.runtime.records import Record
from ldssan.session import decode_outcome
from ldssan.variants import load_variant
from tests.device import device_diff_module

pytest_plugins = ["pytester"]

device_diff = device_diff_module()
BUGS = device_diff.rmsnorm_bugs()


def _inputs():
    gen = torch.Generator().manual_seed(7)
    return torch.randn(2, 512, generator=gen), torch.randn(512, generator=gen)


def _variant(name: str, tag: str):
    return R if name == "clean" else load_variant(R, BUGS[name], tag=f"{tag}_{name}")


def _found(col, *, as_device: bool = False) -> dict:
    """Each violation by (rule, cause, line, other line) -> the waves, workgroups and LDS
    buffer it names and its severity. The waves of the other side are not compared: the
    device keeps one last writer per word, so which earlier writers it names differs
    (runtime/device/DESIGN.md, "Bounded history"). `as_device`: the engine's LDS004 (stores of
    identical bytes; the device runtime sees no stored values) counted as the LDS003 the
    device reports (docs/memory-model.md)."""
    out = {}
    for r in col.results:
        for v in r.report.violations:
            other = v.other_site.location if v.other_site is not None else None
            code, severity = v.code, v.severity
            if as_device and code == "LDS004":
                code, severity = "LDS003", "error"
            key = (code, int(v.cause), v.site.location, other)
            waves, groups = out.get(key, (frozenset(), frozenset()))[:2]
            out[key] = (waves | v.waves, groups | v.workgroups, v.buffer.name if v.buffer else None, severity)
    return out


@pytest.mark.parametrize("name", ["clean", *sorted(BUGS)])
def test_emulated_reports_what_the_python_engine_reports(name):
    mod = _variant(name, "fdev")
    x, g = _inputs()
    with hook.sanitize("round-robin") as host:
        mod.rmsnorm(x, g)
    with hook.sanitize("round-robin", device="emulated") as dev:
        mod.rmsnorm(x, g)
    assert len(dev.results) == len(host.results) == 1
    assert _found(dev) == _found(host, as_device=True)
    assert bool(dev.violations) == (name != "clean")
    assert dev.results[0].report.dropped == 0


def test_emulated_runs_lockstep_per_wave_in_canonical_order():
    """The hooks' uniform updates come from a wave's first active lane: under the device
    runtime the default lockstep policy runs each wave on its own, in the engine's order."""
    with hook.sanitize(device="emulated") as col:
        cfg = frontend.current()
        R.rmsnorm(*_inputs())
    assert str(cfg.policy) == "canonical" and cfg.run.executor == "emulated"
    assert col.results and not col.violations


CHILD = '''
import torch
from ldssan.kernels import rmsnorm as R
from ldssan.variants import Edit, load_variant

LINE = [i + 1 for i, ln in enumerate(open(R.__file__).read().splitlines()) if ln.strip() == "fx.gpu.barrier()"][0]
BUGGY = load_variant(R, [Edit(LINE, None)], tag="child_no_barrier")


def test_clean():
    R.rmsnorm(torch.randn(2, 512), torch.randn(512))


def test_no_barrier():
    BUGGY.rmsnorm(torch.randn(2, 512), torch.randn(512))
'''


def _child(pytester, monkeypatch, device: str):
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_DEVICE", device)
    pytester.makepyfile(test_child=CHILD)
    res = pytester.runpytest_subprocess("-p", "ldssan")
    res.assert_outcomes(passed=1, failed=1)
    out = res.stdout.str()
    summary = sorted(set(re.findall(r"^test_child\.py::test_\w+: LDS\d+ \S+ at \S+$", out, re.M)))
    return out, summary


def test_flydsl_ldssan_1_with_the_device_runtime_fails_the_same_test_with_the_same_report(pytester, monkeypatch):
    out, summary = _child(pytester, monkeypatch, "emulated")
    assert "executor=virtual gfx1250 (device runtime)" in out
    assert "ldssan found LDS synchronization violations" in out
    _host_out, host_summary = _child(pytester, monkeypatch, "off")
    assert summary and summary == host_summary
    assert all("test_no_barrier" in line for line in summary)


def test_hardware_without_a_gfx1250_is_one_line_naming_the_reason(pytester, monkeypatch):
    reason = hw.unavailable_reason()
    assert reason is not None  # no gfx1250 here: this test is about that case
    with pytest.raises(hw.HardwareUnavailable, match=re.escape(reason)):
        hook.enable(device="hardware")
    assert not hook.enabled()
    monkeypatch.setenv("FLYDSL_LDSSAN", "1")
    monkeypatch.setenv("FLYDSL_LDSSAN_DEVICE", "hardware")
    pytester.makepyfile(test_child=CHILD)
    res = pytester.runpytest_subprocess("-p", "ldssan")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: ldssan: FLYDSL_LDSSAN_DEVICE=hardware: {reason}"])


def test_auto_is_the_device_runtime_only_on_a_gfx1250(monkeypatch):
    assert hook.engine_for("auto") == "python"  # no gfx1250 here
    monkeypatch.setattr(hw, "unavailable_reason", lambda: None)
    assert hook.engine_for("auto") == "hardware"
    assert [hook.engine_for(c) for c in ("off", "virtual", "emulated")] == ["python", "python", "emulated"]
    assert "hardware" in config.DEVICE_CHOICES and "FLYDSL_LDSSAN_DEVICE" in config.help_text()


# --- hardware, with the detection and the HIP seam faked ---------------------------------


class FakeRing(hw.DeviceRing):
    """The device ring in host memory; records the calls a gfx1250 run would make."""

    def __init__(self, calls: list):
        self.capacity = 64
        self.device = "cpu"
        self.whole = torch.zeros(L.DESC_BYTES + L.RECORDS_AT + 32 * self.capacity, dtype=torch.uint8)
        self.tensor = self.whole[L.DESC_BYTES:]
        self.addr = self.tensor.data_ptr()
        self.slots = None
        self.calls = calls

    def reset(self, launch, capacity=None):
        self.calls.append(("reset", launch, capacity))
        super().reset(launch, capacity)

    def read(self):
        self.calls.append(("synchronize and read",))
        return hw.ring_from_bytes(self.tensor.numpy().tobytes())

    def kernel_writes(self, records: list[Record]) -> None:
        """What the linked kernel does: records at the cursor, stamped with the launch id."""
        cap, _written, _dropped, launch, _pad = L.RING_HEADER.unpack(self.tensor[: L.RECORDS_AT].numpy().tobytes())
        kept = records[:cap]
        body = b"".join(replace(r, launch=launch).pack() for r in kept)
        head = L.RING_HEADER.pack(cap, len(records), max(0, len(records) - cap), launch, 0)
        self._write(L.DESC_BYTES, head + body)


@pytest.fixture
def fake_gfx1250(monkeypatch):
    """A gfx1250 that is not there: detection says yes, the ring is host memory, and FlyDSL's
    call-state constructor (it loads the code object through HIP; the state launches it) is
    a recorder whose launch writes the records queued in `launched`."""
    from flydsl.compiler import jit_function

    calls: list = []
    ring = FakeRing(calls)
    launched: list = []

    frontend.install()  # FlyDSL's seams first: the fake stands below the emulator's dispatch
    emulator_or_hip = jit_function._call_state_from_spec

    def hip_call_state(call_spec, artifact):
        if frontend._is_emu_artifact(artifact):  # a Python-engine or emulated() run: as before
            return emulator_or_hip(call_spec, artifact)
        calls.append(("load code object", artifact._entry))

        def launch(args_tuple):
            calls.append(("launch",))
            ring.kernel_writes(launched.pop(0) if launched else [])

        return launch

    monkeypatch.setattr(jit_function, "_call_state_from_spec", hip_call_state)
    monkeypatch.setattr(hw, "unavailable_reason", lambda: None)
    monkeypatch.setattr(hw, "gfx1250_device", lambda: 0)
    monkeypatch.setattr(hw, "device_ring", lambda: ring)
    with tempfile.TemporaryDirectory(prefix="ldssan-test-hw-") as scratch:
        env = build_env(f"{scratch}/dump", f"{scratch}/cache")  # ldssan's ld.lld, a fresh FlyDSL cache
        for key in ("COMPILE_ONLY", "FLYDSL_DUMP_IR", "FLYDSL_DUMP_DIR"):  # launched, through the fake
            env.pop(key)
        with patched_env(env):
            yield ring, calls, launched
    assert jit_function._call_state_from_spec is hip_call_state  # uninstalled: the seam is as it was


def _emulated_records(mod) -> list[Record]:
    """What the linked kernel writes for this launch: the device runtime's records on the
    virtual gfx1250, as in the buffer (packed workgroup ids)."""
    with emulated("round-robin") as run:
        mod.rmsnorm(*_inputs())
    return run.ring().records()


@pytest.mark.parametrize("name", ["clean", "a_no_barrier_1"])
def test_hardware_launch_is_built_bound_launched_read_back_and_decoded(fake_gfx1250, name):
    ring, calls, launched = fake_gfx1250
    mod = _variant(name, "fhw")
    written = _emulated_records(mod)
    assert bool(written) == (name != "clean")
    with hook.sanitize("round-robin") as host:
        mod.rmsnorm(*_inputs())

    launched.append(written)
    assert len(written) < ring.capacity  # all kept: a truncated buffer would name fewer waves
    with hook.sanitize(device="hardware") as col:
        cfg = frontend.current()
        mod.rmsnorm(*_inputs())
    assert cfg.run.device.hardware and cfg.run.device.ring_addr == ring.addr  # bound to the ring
    # untagged as emulator input, so FlyDSL's own call state (the HIP load) gets the build
    assert calls[0][0] == "load code object" and calls[0][1]
    assert calls[1:] == [("reset", 1, 4096), ("launch",), ("synchronize and read",)]
    assert len(col.results) == 1
    assert _found(col) == _found(host)
    assert col.results[0].report.dropped == 0


def test_a_full_device_buffer_reaches_the_report_as_dropped_records():
    """The buffer keeps its first `capacity` records and counts the rest: the decoded report
    says how many were dropped (not clean), whatever the LDS030 retractions removed."""
    mod = _variant("e_waw_slot", "fdrop")
    with emulated("round-robin", capacity=3) as run:
        mod.rmsnorm(*_inputs())
    ring = run.ring()
    assert ring.dropped > 0 and len(ring.records()) == 3
    out = outcome(ring, None, entry="e", kernels=("k",), launch=1, sites_json=run.launches[0][1],
                  coverage_json="{}", buffers=())
    report = decode_outcome(out, coverage=False).report
    assert report.dropped == ring.dropped and report.violations


def test_hardware_build_with_a_shadow_in_global_scratch_is_refused(fake_gfx1250):
    """GEMM's LDS is one dynamic arena: its shadow would be in global scratch, whose
    per-launch slots FlyDSL's launch path cannot bind: refused at link time."""
    _ring, calls, _launched = fake_gfx1250
    a, b = (torch.randn(64, 256).to(torch.float8_e4m3fn) for _ in range(2))
    with pytest.raises(DeviceLinkError, match="the shadow is in global scratch, whose per-launch slots"):
        with hook.sanitize(device="hardware"):
            G.gemm(a, b, waves=4, nb=3)
    assert calls == []  # nothing loaded, nothing launched

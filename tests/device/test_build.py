"""gfx1250 code objects with the device runtime linked in (compile-only: FlyDSL lowers the
linked module and links it with the `ld.lld` ldssan ships), `ldssan build --device`, and the
cache keys that keep device, sanitized and plain builds apart. The hardware suite is
tests/hardware/."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ldssan import hook
from ldssan.cli import main
from ldssan.decode import decode
from ldssan.isa.capture import EM_AMDGPU, capture_builds, elf_machine
from ldssan.kernels import rmsnorm as R
from ldssan.runtime.device import DeviceLinkError, ShadowLayout, emulated
from ldssan.runtime.device.build import building
from ldssan.devicebuild import kernel_metadata
from ldssan.variants import load_variant
from tests.device import device_diff_module
from tests.hardware import bundled

device_diff = device_diff_module()
BUNDLED = Path(bundled.__file__)


def test_rmsnorm_builds_a_gfx1250_code_object_with_the_shadow_in_its_lds():
    case = device_diff.cases(quick=True)[0]
    plain = device_diff.code_object(case, device=False)
    dev = device_diff.code_object(case, device=True)
    assert set(plain) == set(dev) == {"rmsnorm_kernel_0"}
    p, d = plain["rmsnorm_kernel_0"], dev["rmsnorm_kernel_0"]
    assert p["elf_amdgpu"] and d["elf_amdgpu"]
    shadow = ShadowLayout(waves=8, sites=6, lds_bytes=48).bytes  # RMSNorm: 8 waves, 6 sites
    assert d["group_segment_fixed_size"] == p["group_segment_fixed_size"] + shadow
    assert d["elf_bytes"] > p["elf_bytes"]  # the hook bodies are in the kernel


def test_compile_only_builds_read_the_ring_address_from_an_exported_module_global():
    """Bound to no buffer, the hooks load the record buffer's address from `@__ldssan_ring`
    (once per kernel: an invariant load), exported for hipModuleGetGlobal; a plain build has
    no such global, and a build bound to a buffer (the virtual gfx1250) bakes it in."""
    from ldssan.runtime.device import hardware as hw

    case = device_diff.cases(quick=True)[0]
    mod = load_variant(case.module, [], tag="ring_global")  # its own module: no in-process build reused
    with building():
        dev = capture_builds(case.call, mod)
    plain = capture_builds(case.call, mod)
    assert dev and plain
    for b in dev:
        lines = [ln.strip() for ln in b.isa.splitlines()]
        assert hw.has_ring_global(b.elf) and f".globl\t{hw.RING_SYMBOL}" in lines
        assert sum(hw.RING_SYMBOL + "@" in ln for ln in lines) == 1  # one address load per kernel
    assert not any(hw.has_ring_global(b.elf) for b in plain)


def _host_keys(col) -> dict:
    return device_diff._keys(v for r in col.results for v in r.report.violations)


def _device_keys(run) -> dict:
    ring, records, keys = run.ring(), run.records(), {}
    for launch, sites in run.launches:
        mine = [r for r in records if r.launch == launch]
        keys.update(device_diff._keys(decode(mine, sites, dropped=ring.dropped, capacity=ring.capacity).violations))
    return keys


def test_plain_sanitized_and_device_builds_of_one_kernel_never_share_a_cache_entry():
    """One process, one kernel (a planted missing barrier): the device build first, then a
    plain build, a sanitized host run and a device run on the virtual gfx1250. Each compiles
    its own build (a shared entry would hand one of them the other's code); a repeat of a
    kind is served from that kind's own entry and compiles nothing."""
    mod = load_variant(R, device_diff.rmsnorm_bugs()["a_no_barrier_1"], tag="devb_cachekey")

    def call():
        bundled.launch_rmsnorm(mod)

    with building() as session:
        dev = capture_builds(call)
    plain = capture_builds(call)
    assert len(dev) == len(plain) == len(session.linked) == 1
    assert dev[0].elf != plain[0].elf
    (d,), (p,) = kernel_metadata(dev[0].isa).values(), kernel_metadata(plain[0].isa).values()
    layout = next(iter(session.linked[0].layouts.values()))
    assert layout["where"] == "lds"
    assert d["group_segment_fixed_size"] == p["group_segment_fixed_size"] + layout["shadow_bytes"]

    with hook.sanitize("round-robin") as col:
        call()
    host = _host_keys(col)
    assert {k[0] for k in host} == {"LDS001"}  # the Python engine ran: the missing barrier's race
    with emulated("round-robin") as run:
        call()
    assert run.ring().written > 0 and set(_device_keys(run)) == set(host)  # the kernel checked itself

    with building() as again:
        assert capture_builds(call) == []
    assert again.linked == []
    assert capture_builds(call) == []


def test_cli_build_device_writes_the_code_objects_and_reports_both_builds(tmp_path, capsys):
    out, report = tmp_path / "objs", tmp_path / "build.json"
    assert main(["build", "--device", f"{BUNDLED}::launch_rmsnorm", "-o", str(out), "--json", str(report)]) == 0
    text = capsys.readouterr().out
    (k,) = json.loads(report.read_text())["kernels"]
    assert k["kernel"] == "rmsnorm_kernel_0" and k["elf_amdgpu"] and k["elf_machine"] == EM_AMDGPU
    dev, plain = Path(k["path"]).read_bytes(), Path(k["plain_path"]).read_bytes()
    assert elf_machine(dev) == elf_machine(plain) == EM_AMDGPU and len(dev) == k["elf_bytes"] > len(plain)
    side = json.loads(Path(k["sites_path"]).read_text())
    assert side["sites"]["sites"] and side["shadow"] == k["shadow"]
    lds = "group_segment_fixed_size"
    assert k["device"][lds] == k["plain"][lds] + k["shadow"]["shadow_bytes"]
    assert k["device"]["vgpr_count"] >= k["plain"]["vgpr_count"]
    # the text names the file and gives both builds' figures
    assert k["path"] in text and f"LDS B {k['plain'][lds]} -> {k['device'][lds]}" in text


def test_cli_build_refusals_are_one_line(tmp_path, capsys, monkeypatch):
    assert main(["build", f"{BUNDLED}::launch_rmsnorm"]) == 2
    assert "pass --device" in capsys.readouterr().err
    assert main(["build", "--device", f"{BUNDLED}::launch_nothing", "-o", str(tmp_path)]) == 2
    assert "built no FlyDSL kernel" in capsys.readouterr().err

    # no linker: no ROCm root with ld.lld and no ziglang
    import importlib.util as iu

    real = iu.find_spec
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: None if name == "ziglang" else real(name, *a))
    assert main(["build", "--device", f"{BUNDLED}::launch_rmsnorm_1x1024", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no ld.lld" in err and "ziglang" in err


def test_cli_build_names_the_op_and_line_a_link_refuses(tmp_path, capsys, monkeypatch):
    """FlyDSL wraps a failing pass in its own error; the user still sees the linker's
    DeviceLinkError, on one line, and no code object is written."""
    link_mod = sys.modules["ldssan.runtime.device.link"]

    def refuse(module_op, ring_addr, **_options):
        s = json.loads(module_op.attributes["ldssan.sites"].value)["sites"][0]
        raise DeviceLinkError(f"ldssan device runtime: {s['op']} at {s['file']}:{s['line']}: refused\n(test)")

    monkeypatch.setattr(link_mod, "link", refuse)
    out = tmp_path / "objs"
    assert main(["build", "--device", f"{BUNDLED}::launch_rmsnorm_1x1024", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ldssan build: error: ldssan device runtime: ")
    assert f"{Path(R.__file__).name}:" in err and "refused (test)" in err
    assert not out.exists()


def test_hardware_host_side_refuses_here_and_reads_back_a_ring():
    """What runs without a GPU: the refusal names what is missing; the read-back of a
    buffer (header with launch id, records) validates the counts as `Ring` does."""
    from ldssan.runtime.device import hardware as hw
    from ldssan.runtime.device import layout as L
    from ldssan.runtime.records import Record, RecordFormatError, Rule

    reason = hw.unavailable_reason()
    if reason is not None:
        with pytest.raises(hw.HardwareUnavailable, match="no gfx1250 HIP device"):
            with hw.on_device():
                pass
    recs = [Record(rule=Rule.RAW_UNPUBLISHED, cause=1, site=0, other_site=1, lds_offset=4 * w, wave=w,
                   other_wave=0, lane=0, other_lane=0, workgroup=0, launch=7) for w in (1, 2)]
    # capacity 2, written 3, dropped 1 (launch id 7): the first two records kept
    ring = hw.ring_from_bytes(L.RING_HEADER.pack(2, 3, 1, 7, 0) + b"".join(r.pack() for r in recs))
    assert (ring.capacity, ring.written, ring.dropped, ring.records()) == (2, 3, 1, recs)
    with pytest.raises(RecordFormatError):
        hw.ring_from_bytes(bytes(L.RING_HEADER.pack(2, 3, 0, 7, 0)) + bytes(64))  # dropped != written - cap
    with pytest.raises(RecordFormatError):
        hw.ring_from_bytes(bytes(L.RING_HEADER.pack(4, 1, 0, 7, 0)) + bytes(32))  # capacity past the buffer
    assert hw.has_ring_global(b"x\0" + hw.RING_SYMBOL.encode() + b"\0") and not hw.has_ring_global(bytes(64))

"""`ldssan build --device FILE::FUNC`: the gfx1250 code objects of every kernel FUNC builds,
with the device runtime (`ldssan.runtime.device`) linked in, beside the plain build's.

FUNC is called twice with no arguments in compile-only mode (`ldssan.isa.capture`): once
plain, once inside `runtime.device.build.building()`. Per kernel: the device code object
(`KERNEL.hsaco`), the plain one (`KERNEL.plain.hsaco`), the site table and shadow layout
the device build's records decode with (`KERNEL.ldssan.json`), and the register / LDS /
scratch figures of both from the code object's metadata.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ldssan.passes.ir.errors import UsageError
from .isa.capture import EM_AMDGPU, Build, capture_builds, elf_machine
from .isa.run import IsaTargetError

DEFAULT_OUT = "ldssan-device-build"
# The figures of `amdhsa.kernels` a build reports (the kernel descriptor's resource use).
FIGURES = ("vgpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count",
           "group_segment_fixed_size", "private_segment_fixed_size")
UNBOUND_NOTE = ("the record buffer is not bound in these code objects: the hooks read its address from "
                "the module global __ldssan_ring (0 until bound); after loading one, bind it with "
                "ldssan.runtime.device.hardware.bind_module_global before launching")


class DeviceBuildError(UsageError, ValueError):
    """The plain and device builds of FUNC do not pair up (see the message)."""


def kernel_metadata(isa: str) -> dict[str, dict[str, int]]:
    """{kernel name: FIGURES} from the `.amdgpu_metadata` document of a build's final ISA,
    which the assembler stores as the code object's metadata note."""
    start, end = isa.find(".amdgpu_metadata"), isa.find(".end_amdgpu_metadata")
    if start < 0 or end < start:
        raise DeviceBuildError("the build's ISA has no .amdgpu_metadata document")
    kernels, cur = {}, None
    for line in isa[start:end].splitlines():
        if line.startswith("  - "):  # a new entry of amdhsa.kernels
            cur = {}
        key, _, value = line.strip().lstrip("- ").partition(":")
        if cur is None or not key.startswith("."):
            continue
        if key == ".name":
            kernels[value.strip()] = cur
        elif key.lstrip(".") in FIGURES and value.strip().isdigit():
            cur[key.lstrip(".")] = int(value)
    return kernels


@dataclass
class KernelBuild:
    kernel: str  # FlyDSL's kernel symbol (with a -N suffix when FUNC builds it more than once)
    path: str  # the device code object
    plain_path: str
    sites_path: str
    elf_machine: int
    elf_amdgpu: bool
    elf_bytes: int
    plain_elf_bytes: int
    device: dict  # FIGURES of the device build
    plain: dict  # FIGURES of the plain build
    shadow: dict  # the linked shadow layout (ShadowLayout.to_dict) of its gpu.module


def _figures(b: Build) -> dict:
    meta = kernel_metadata(b.isa)
    if len(meta) != 1:
        raise DeviceBuildError(f"{b.kernel}: expected one kernel in its code object, found {sorted(meta)}")
    return next(iter(meta.values()))


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if names.count(n) == 1 else f"{n}-{seen[n]}")
    return out


def _pair(plain: list[Build], dev: list[Build], linked: list) -> list[tuple[Build, Build, object]]:
    if not dev:
        raise IsaTargetError("the call built no FlyDSL kernel (it launched none, or this process had "
                             "already compiled them: run it in a fresh process)")
    if [b.kernel for b in plain] != [b.kernel for b in dev] or len(linked) != len(dev):
        raise DeviceBuildError(f"the plain builds {[b.kernel for b in plain]} and the device builds "
                               f"{[b.kernel for b in dev]} ({len(linked)} linked) do not pair up: "
                               "does FUNC launch the same kernels on every call?")
    return list(zip(plain, dev, linked))


def build_device(fn, out_dir: str | Path = DEFAULT_OUT) -> list[KernelBuild]:
    """Build `fn()`'s kernels plain and with the device runtime; write them to `out_dir`."""
    from ldssan.runtime.device.build import building

    plain = capture_builds(fn)
    with building() as session:
        dev = capture_builds(fn)
    pairs = _pair(plain, dev, session.linked)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name, (p, d, link) in zip(_unique([b.kernel for b in dev]), pairs):
        paths = [out / f"{name}.hsaco", out / f"{name}.plain.hsaco", out / f"{name}.ldssan.json"]
        paths[0].write_bytes(d.elf)
        paths[1].write_bytes(p.elf)
        layout = next(iter(link.layouts.values()))
        paths[2].write_text(json.dumps({"kernel": d.kernel, "sites": json.loads(link.sites_json),
                                        "shadow": layout, "record_buffer": UNBOUND_NOTE}, indent=1))
        machine = elf_machine(d.elf)
        results.append(KernelBuild(name, str(paths[0]), str(paths[1]), str(paths[2]), machine,
                                   machine == EM_AMDGPU, len(d.elf), len(p.elf), _figures(d), _figures(p), layout))
    return results


_COLUMNS = (("VGPR", "vgpr_count"), ("SGPR", "sgpr_count"), ("LDS B", "group_segment_fixed_size"),
            ("scratch B", "private_segment_fixed_size"))


def render_text(results: list[KernelBuild]) -> str:
    lines = []
    for r in results:
        kind = "EM_AMDGPU" if r.elf_amdgpu else f"e_machine {r.elf_machine} (not AMDGPU)"
        lines.append(f"{r.kernel}: {r.path} ({kind}, {r.elf_bytes} bytes; plain {r.plain_elf_bytes})")
        cells = ", ".join(f"{label} {r.plain.get(key, '?')} -> {r.device.get(key, '?')}" for label, key in _COLUMNS)
        lines.append(f"  plain -> device: {cells}")
    lines.append(f"note: {UNBOUND_NOTE}")
    return "\n".join(lines) + "\n"


def to_json(results: list[KernelBuild]) -> dict:
    return {"schema": "ldssan.device-build/1", "note": UNBOUND_NOTE, "kernels": [asdict(r) for r in results]}


HELP = """\
FUNC is called with no arguments and launches FlyDSL kernels; FlyDSL runs in compile-only
mode for gfx1250 (ldssan supplies ld.lld), so nothing executes. Each kernel is built twice,
plain and with the device runtime linked in (runtime/device/DESIGN.md).

exit status: 0 built; 2 usage error (bad FILE::FUNC: a FILE that does not import, a FUNC
that needs arguments or raises; no linker, an error of the gfx1250 backend, a kernel the
device runtime cannot link yet -- the message names the op and its line -- or an unwritable
-o/--json, checked before anything is built)"""


def _cmd(args) -> int:
    import sys

    from ldssan.report import output_dir_problem, report_path_problem
    from ldssan.runtime.device import DeviceLinkError

    from .isa.run import guarded, resolve
    from .isa.toolchain import IsaToolchainError

    if not args.device:
        print("ldssan build: error: only device builds exist: pass --device", file=sys.stderr)
        return 2
    try:
        if problem := output_dir_problem(args.output):
            raise DeviceBuildError(f"-o/--output: {problem}")
        if args.json not in (None, "-") and (problem := report_path_problem(args.json)):
            raise DeviceBuildError(f"--json: {problem}")
        fn = guarded(resolve(args.target), args.target)
        try:
            results = build_device(fn, args.output)
        except OSError as exc:
            raise DeviceBuildError(f"-o/--output: cannot write into {args.output!r}: {exc.strerror or exc}") from None
        if args.json not in (None, "-"):
            _write_json(results, args.json)
    except (IsaTargetError, IsaToolchainError, DeviceLinkError, DeviceBuildError) as exc:
        text = " ".join(str(exc).split())
        print(f"ldssan build: error: {text}", file=sys.stderr)
        return 2
    if args.json == "-":
        print(json.dumps(to_json(results), indent=1))
    else:
        sys.stdout.write(render_text(results))
    return 0


def _write_json(results: list[KernelBuild], path: str) -> None:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(to_json(results), indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise DeviceBuildError(f"--json: cannot write {path!r}: {exc.strerror or exc}") from None


def register(sub) -> None:
    import argparse

    p = sub.add_parser("build", help="gfx1250 code objects with the device runtime linked in (--device)",
                       description="Build the gfx1250 code objects of every kernel FUNC launches, "
                                   "with ldssan's device runtime linked in, beside the plain build.",
                       epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE::FUNC", help="a .py file (or module) and a function in it")
    p.add_argument("--device", action="store_true", help="link the device runtime (required)")
    p.add_argument("-o", "--output", default=DEFAULT_OUT, metavar="DIR",
                   help=f"where the code objects and site tables go (default ./{DEFAULT_OUT})")
    p.add_argument("--json", nargs="?", const="-", metavar="OUT",
                   help="print the result as JSON (schema ldssan.device-build/1), or write it to OUT")
    p.set_defaults(fn=_cmd)

"""What the device runtime costs each bundled kernel in registers, LDS, scratch and code size:
a compile-only gfx1250 build of each kernel plain and with the device runtime linked in
(`ldssan.devicebuild.build_device`, the code behind `ldssan build --device`), figures from
each code object's `amdhsa.kernels` metadata.

    python benchmarks/device_overhead.py [--json out.json]

prints {"kernels": [{"kernel", "case", "plain": {...}, "device": {...}, "delta": {...},
"shadow": {...}}, ...], "not_linked": {case: reason}}. A case whose kernel the device
runtime does not link yet (or whose linked module LLVM or ld.lld rejects) is listed under
`not_linked` with the error's message.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from device_diff import cases  # noqa: E402  (the benchmark folder is not a package)

from ldssan.devicebuild import build_device  # noqa: E402
from ldssan.isa.toolchain import IsaToolchainError  # noqa: E402
from ldssan.runtime.device import DeviceLinkError  # noqa: E402

FIGURES = ("vgpr_count", "sgpr_count", "group_segment_fixed_size", "private_segment_fixed_size", "elf_bytes")


def _figures(build, which: str) -> dict:
    out = dict(build.device if which == "device" else build.plain)
    out["elf_bytes"] = build.elf_bytes if which == "device" else build.plain_elf_bytes
    return {k: out.get(k) for k in FIGURES} | {k: out[k] for k in out if k.endswith("spill_count")}


def measure(case, out_dir: str) -> list[dict]:
    builds = build_device(lambda: case.call(case.module), Path(out_dir) / case.name)
    rows = []
    for b in builds:
        plain, dev = _figures(b, "plain"), _figures(b, "device")
        rows.append({"case": case.name, "kernel": b.kernel, "elf_amdgpu": b.elf_amdgpu, "plain": plain,
                     "device": dev, "delta": {k: dev[k] - plain[k] for k in FIGURES
                                              if dev.get(k) is not None and plain.get(k) is not None},
                     "shadow": b.shadow})
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    # one clean case per bundled kernel (the planted bugs build the same kernels)
    todo = [c for c in cases(quick=False) if not c.edits]
    firsts = {}
    for c in todo:
        firsts.setdefault(c.module.__name__, c)
    out = {"kernels": [], "not_linked": {}}
    with tempfile.TemporaryDirectory(prefix="ldssan-overhead-") as tmp:
        for case in firsts.values():
            try:
                out["kernels"].extend(measure(case, tmp))
            except (DeviceLinkError, IsaToolchainError) as exc:
                # refused by the device linker, or the linked module failed in LLVM / ld.lld
                out["not_linked"][case.name] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    main()

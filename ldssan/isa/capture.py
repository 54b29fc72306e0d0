"""Run a callable that launches FlyDSL kernels as compile-only gfx1250 builds, and keep
each build's code object (ELF) and final ISA.

FlyDSL writes the ISA in `_dump_isa` after the pass loop, by which time the
`NN_gpu_module_to_binary.mlir` dump holding the linked ELF exists; wrapping `_dump_isa`
captures every build in order, even when two builds of one kernel share a dump directory.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ldssan.console import counted
from ldssan.passes.abi import HOOKS

from .intent import pick_stage
from .toolchain import IsaToolchainError, build_env, patched_env

EM_AMDGPU = 224


@dataclass(frozen=True)
class Build:
    kernel: str  # the dump directory's name: FlyDSL's kernel symbol, e.g. rmsnorm_kernel_0
    isa: str  # the final ISA text (with .file/.loc line table)
    elf: bytes  # the linked gfx1250 code object
    ir: str = ""  # the IR the sanitizer instruments (dump stage after convert-fly-to-rocdl), if dumped


class _DropCompileChatter(io.TextIOBase):
    """stdout minus FlyDSL's `[flydsl.compile] dump ...` lines (one per stage per kernel)."""

    def __init__(self, out):
        self._out, self._pending = out, ""

    def write(self, s: str) -> int:
        self._pending += s
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not line.startswith("[flydsl.compile]"):
                self._out.write(line + "\n")
        return len(s)

    def flush(self) -> None:
        if self._pending and not self._pending.startswith("[flydsl.compile]"):
            self._out.write(self._pending)
        self._pending = ""
        self._out.flush()


_BIN = re.compile(r'bin = "((?:[^"\\]|\\.)*)"')


def _unescape_mlir_bytes(text: str) -> bytes:
    """MLIR's printed string: `\\XX` hex escapes, `\\\\`, `\\"`; other characters raw."""
    out, i = bytearray(), 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode("latin-1")
            i += 1
        elif text[i + 1] in '\\"':
            out += text[i + 1].encode()
            i += 2
        else:
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
    return bytes(out)


def elf_from_dump(dump_dir: Path) -> bytes:
    """The code object in the newest `*_gpu_module_to_binary.mlir` of a dump directory."""
    dumps = sorted(dump_dir.glob("*_gpu_module_to_binary.mlir"), key=lambda p: p.stat().st_mtime_ns)
    if not dumps:
        raise IsaToolchainError(f"{dump_dir}: FlyDSL wrote no gpu_module_to_binary stage")
    found = _BIN.search(dumps[-1].read_text())
    if found is None:
        raise IsaToolchainError(f"{dumps[-1]}: no `bin = \"...\"` code object in the gpu.binary op")
    return _unescape_mlir_bytes(found.group(1))


def elf_machine(elf: bytes) -> int:
    """e_machine of a little-endian ELF (224 = EM_AMDGPU)."""
    if elf[:4] != b"\x7fELF" or len(elf) < 20:
        raise IsaToolchainError("the code object is not an ELF file")
    return int.from_bytes(elf[18:20], "little")


@contextlib.contextmanager
def backend_errors(found: list[str]):
    """Collect the `error: ...` diagnostics native code (LLVM's gfx1250 backend) writes to
    file descriptor 2 during the block into `found`; everything else written there is passed
    on to stderr. The backend reports an error such as "local memory (N) exceeds limit" this
    way and still emits a code object, so its text is the only sign of it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield found
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode("utf-8", "replace").splitlines(keepends=True):
                if line.startswith("error: "):
                    text = line[len("error: "):].strip()
                    if text not in found:  # LLVM prints some twice
                        found.append(text)
                else:
                    sys.stderr.write(line)
            sys.stderr.flush()


def capture_builds(fn, *args, **kwargs) -> list[Build]:
    """Call `fn(*args, **kwargs)` with FlyDSL in compile-only gfx1250 mode (ldssan's linker,
    line tables, a fresh cache) and return every kernel build it made."""
    from flydsl.compiler import jit_function

    from ldssan.runtime import seam
    from ldssan.runtime.emu import frontend

    # Raw rocdl builders (s_barrier_signal, s_wait_dscnt) otherwise carry the kernel's
    # `def` line into the line table, not their call line.
    frontend.install_locations()
    builds: list[Build] = []

    def recording(original):
        def recording_dump_isa(*, dump_dir, **kw):
            return _recorded(builds, dump_dir, original(dump_dir=dump_dir, **kw))

        return recording_dump_isa

    with tempfile.TemporaryDirectory(prefix="ldssan-isa-") as scratch:
        env = build_env(str(Path(scratch) / "dump"), str(Path(scratch) / "cache"))
        errors: list[str] = []
        with patched_env(env), contextlib.redirect_stdout(_DropCompileChatter(sys.stdout)), backend_errors(errors):
            if not seam.install("capture", [(jit_function, "_dump_isa", recording)]):
                raise RuntimeError("ldssan ISA check: a capture inside another capture")
            try:
                fn(*args, **kwargs)
            except Exception as exc:
                cause = exc.__cause__ if exc.__cause__ is not None else exc  # through a guarded() FUNC
                if "lld" not in str(cause):
                    raise  # the user's call failed: theirs to report
                raise IsaToolchainError(f"linking with {env['ROCM_PATH']}/llvm/bin/ld.lld failed: "
                                        f"{str(cause).splitlines()[0]}") from exc
            finally:
                seam.uninstall("capture")
                sys.stdout.flush()
    if errors:
        raise IsaToolchainError(f"the gfx1250 backend reported {counted(len(errors), 'error')}, so its code object is "
                                f"not the kernel as written: {'; '.join(errors)}")
    return builds


def _recorded(builds: list[Build], dump_dir, out):
    """After FlyDSL dumped a build's ISA to `out`: keep the build (refused if it carries
    ldssan's hooks)."""
    if out is not None:
        isa = Path(out).read_text()
        hooks = sorted(name for name in HOOKS if name in isa)
        if hooks:
            # COMPILE_ONLY makes the emulator front end pass FlyDSL's pipeline through;
            # a build with ldssan's hooks in it is not the code the hardware runs.
            raise IsaToolchainError(f"{Path(dump_dir).name}: the compile-only build carries "
                                    f"ldssan's instrumentation (calls to {', '.join(hooks)}); refusing to check it")
        stage = pick_stage([p.name for p in Path(dump_dir).glob("*.mlir")])
        ir = (Path(dump_dir) / stage).read_text() if stage else ""
        builds.append(Build(Path(dump_dir).name, isa, elf_from_dump(Path(dump_dir)), ir))
    return out

"""The linker FlyDSL needs for a gfx1250 code object, from this project's own install.

FlyDSL 0.5.0 on Linux links the assembled kernel with `$ROCM_PATH/llvm/bin/ld.lld` (the
ROCDL serializer reads `ROCM_PATH` when it runs; default /opt/rocm). ldssan depends on PyPI
`ziglang`, which ships LLD (`zig ld.lld`), and lays out a substitute ROCm root whose
`llvm/bin/ld.lld` is a two-line shim running the zig binary inside that package directly (not
`python -m ziglang`: a child interpreter pays this environment's start-up on every link). No ROCm, no
network: the wheel carries the linker.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from ldssan.passes.ir.errors import UsageError
from ldssan.runtime.zig import zig_command
from ldssan.scoped import scoped_items


class IsaToolchainError(UsageError, RuntimeError):
    """No usable linker (or assembler) for the gfx1250 code object: says what is missing."""


def _user_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    # One root per zig command: the shim names the ziglang install (its binary, or the
    # interpreter that runs it) it runs.
    key = hashlib.sha256(" ".join(zig_command()).encode()).hexdigest()[:12]
    return Path(base) / "ldssan" / f"rocm-root-{key}"


def _has_lld(root: str | os.PathLike | None) -> bool:
    return bool(root) and os.access(Path(root) / "llvm" / "bin" / "ld.lld", os.X_OK)


def linker_root() -> Path:
    """A directory with `llvm/bin/ld.lld` running ziglang's LLD (made once, then reused)."""
    if importlib.util.find_spec("ziglang") is None:
        raise IsaToolchainError(
            "no ld.lld: the `ziglang` package (a dependency of ldssan) is not installed; "
            "reinstall ldssan (pip install -e .) or set ROCM_PATH to a root with llvm/bin/ld.lld")
    root = _user_root()
    shim = root / "llvm" / "bin" / "ld.lld"
    text = "#!/bin/sh\nexec " + " ".join(shlex.quote(part) for part in zig_command()) + ' ld.lld "$@"\n'
    if not shim.is_file() or shim.read_text() != text:
        shim.parent.mkdir(parents=True, exist_ok=True)
        # Written beside and renamed: a concurrent process never runs half a script.
        fd, tmp = tempfile.mkstemp(dir=shim.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, shim)
    return root


def rocm_root() -> str:
    """The ROCm root FlyDSL should link with: the user's `ROCM_PATH` if it has ld.lld,
    otherwise ldssan's own."""
    user = os.environ.get("ROCM_PATH")
    return user if _has_lld(user) else str(linker_root())


def check_linker(root: str | os.PathLike) -> str:
    """Run the root's ld.lld once; its version line, or IsaToolchainError with its output."""
    lld = Path(root) / "llvm" / "bin" / "ld.lld"
    try:
        out = subprocess.run([str(lld), "--version"], capture_output=True, text=True, timeout=120)
    except OSError as exc:
        raise IsaToolchainError(f"{lld} cannot run: {exc}") from exc
    if out.returncode != 0 or "LLD" not in out.stdout:
        raise IsaToolchainError(f"{lld} --version failed: {(out.stdout + out.stderr).strip()[:300]}")
    return out.stdout.strip().splitlines()[0]


# What a compile-only gfx1250 build with a line table needs (docs/architecture.md, how ldssan hooks into FlyDSL):
# COMPILE_ONLY (not FLYDSL_COMPILE_ONLY), FLYDSL_GPU_ARCH (ARCH alone is half an override),
# the per-stage dumps (the ELF and the ISA are written there), and debug info for `.loc`.
def build_env(dump_dir: str, cache_dir: str) -> dict[str, str]:
    return {
        "ROCM_PATH": rocm_root(),
        "COMPILE_ONLY": "1",
        "FLYDSL_GPU_ARCH": "gfx1250",
        "ARCH": "gfx1250",
        "FLYDSL_DUMP_IR": "1",
        "FLYDSL_DUMP_DIR": dump_dir,
        "FLYDSL_DEBUG_ENABLE_DEBUG_INFO": "1",
        # A fresh cache: a cache hit compiles nothing, so nothing would be dumped.
        "FLYDSL_RUNTIME_CACHE_DIR": cache_dir,
    }


def patched_env(values: dict[str, str]):
    """Set `values` in os.environ for the block, restoring what was there before."""
    return scoped_items(os.environ, values)

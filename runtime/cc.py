"""C compiled for this CPU: source to a shared object loaded with ctypes, cached on disk.

The virtual gfx1250's native runs (`emu/native/`) and the shadow's compiled checks
(`shadow/compiled.py`) are built here.

The compiler is `zig cc` (clang inside PyPI `ziglang`, already a dependency for the gfx1250
linker; `ldssan.runtime.zig` finds it), so no system compiler is needed. The module links
with nothing (`-nostdlib`: the C uses builtins only) and never contracts a multiply-add
(`-ffp-contract=off`): every float op rounds once, as numpy's does. Objects are cached on
disk under the digest of the source, the flags and ziglang's version
(`$XDG_CACHE_HOME/ldssan/native/`), written beside and renamed so concurrent processes never
load half a file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.errors import LdssanError
from ldssan.runtime.zig import zig_command, zig_version

# for this CPU (AVX2 where there is one: the runs are memory-bound loops, 1.5x faster than
# SSE4.2's); the CPU's identity is part of the cache key, so a cache shared by machines
# never hands one of them code it cannot run
FLAGS = ("-O2", "-shared", "-fPIC", "-nostdlib", "-ffp-contract=off", "-fno-math-errno", "-mcpu=native", "-w")
TIMEOUT = 120  # seconds; a first run of zig builds nothing for -nostdlib (about 0.2 s)


class NativeBuildError(LdssanError, RuntimeError):
    """C of ldssan did not compile or load (native runs then stay interpreted; the shadow checks
    in numpy)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ldssan" / "native"


@register_cache
@cache
def _cpu() -> str:
    """The host CPU's model and features (what `-mcpu=native` compiles for)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() + platform.processor()
    keep = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))][:2]
    return "\n".join(keep)


def digest(source: str) -> str:
    h = hashlib.sha256()
    for part in (source, " ".join(FLAGS), zig_version(), _cpu()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


# A cold compile's seconds, measured on the 2-core VM of ldssan's CI: a fixed cost plus a
# cost per line of C (0.4 s for 150 lines, 3 s for 5000). `plan`'s deferred build uses it.
COMPILE_FIXED_S = 0.2
COMPILE_PER_LINE_S = 0.0006


def estimate_seconds(source: str) -> float:
    """About how long compiling `source` takes when it is not cached."""
    return COMPILE_FIXED_S + COMPILE_PER_LINE_S * source.count("\n")


def cached(source: str) -> bool:
    """Whether the object of `source` is in the disk cache (loading it costs milliseconds)."""
    return (cache_dir() / f"{digest(source)}.so").is_file()


def load(source: str) -> ctypes.CDLL:
    """The shared object of `source`, compiled once per machine (NativeBuildError if not)."""
    if not zig_version():
        raise NativeBuildError("no C compiler: the `ziglang` package (a dependency of ldssan) is not installed")
    root = cache_dir()
    so = root / f"{digest(source)}.so"
    if so.is_file():
        try:
            return ctypes.CDLL(str(so))
        except OSError:
            so.unlink(missing_ok=True)  # a damaged object: built again below
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        c = Path(tmp) / "runs.c"
        c.write_text(source)
        out = Path(tmp) / "runs.so"
        try:
            done = subprocess.run([*zig_command(), "cc", *FLAGS, "-o", str(out), str(c)],
                                  capture_output=True, text=True, timeout=TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NativeBuildError(f"the C compiler did not run: {exc}") from exc
        if done.returncode != 0 or not out.is_file():
            raise NativeBuildError(f"the C compiler failed: {(done.stderr or done.stdout).strip()[:600]}")
        os.replace(out, so)
    try:
        return ctypes.CDLL(str(so))
    except OSError as exc:
        raise NativeBuildError(f"the compiled runs do not load: {exc}") from exc

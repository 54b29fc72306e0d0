"""Wiring into FlyDSL 0.5.0: the virtual gfx1250 as FlyDSL's execution target.

While `active()` is on, these FlyDSL seams are patched (through `runtime.seam`, group
`frontend`; `uninstall()` takes them out):

1. `RocmBackend.pipeline_fragments` ends the pipeline right after `convert-fly-to-rocdl` +
   `canonicalize` (scf still structured) with a versioned `ldssan{...}` sentinel fragment.
   Fragments are part of FlyDSL's cache key, so emulated, instrumented and plain builds
   never share a cache entry (docs/architecture.md, "FlyDSL seams").
2. `jit_function.PassManager.parse` replaces the sentinel with the Python pass the active
   context names (`EmuConfig.sentinel_pass`: the ldssan instrumentation, the device
   runtime's link, or a tag for plain emulation).
3. `jit_function._call_state_from_spec` returns an `EmuCallState` for such artifacts: the
   user's `launch(...)` with CPU tensors runs here, results land in the tensors.

FlyDSL needs `FLYDSL_GPU_ARCH` (and `ARCH`) to pick gfx1250 without a GPU: `ARCH` alone
leaves DSL helpers on gfx942 code paths (docs/architecture.md, "FlyDSL seams").
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

from ldssan.passes.ir.caches import register_reset
from ldssan.passes import locations
from ldssan.passes.ir.irview import view_module

from .. import seam
from . import calls, memo, threads, unchecked
from .unchecked import file_of, module_kernels, unchecked_fragments
from .calls import CALLS, LaunchNotRun  # noqa: F401  (the pytest plugin's and users' names)
from .launch import Launcher, bind_pointers, host_arguments
from .memory import GlobalMemory, in_host_memory
from .runconfig import RunConfig
from .specialize import specialization

SENTINEL = unchecked.SENTINEL
VERSION = "0.1.0"
PLAIN = RunConfig()  # plain emulation: also what a sanitized run's out-of-scope modules are built as


@dataclass
class EmuConfig:
    """The front end's context for one run: its `RunConfig` (data: what the run is) and
    the callbacks and results of the run."""

    run: RunConfig = field(default_factory=RunConfig)
    launches: list = field(default_factory=list)  # LaunchRecord of every launch, in order
    # factory(sites_json, entry, view) -> ldssan.runtime.session.ShadowSession, or None
    sanitizer_factory: object = None
    # on_fault(exc, entry, sanitizer) -> the exception to raise for a launch that raised `exc`
    # (the sanitizer records it: a caught fault still reaches the report), or None
    on_fault: object = None
    memo: "memo.Memo | None" = None  # identical host calls replayed (memo.py); None: off
    # scope.covers([(kernel symbol, defining file), ...]) -> whether a module with these kernels
    # is instrumented; one it leaves out is built plain and its launches reported through
    # scope.skipped(kernels) (ldssan.scope.Scope; None: every module). Part of the launch key.
    scope: object = None
    # the pass run at the sentinel, pass(op, pass_) (None: plain emulation's tag). Not part
    # of the key: which pass runs follows from `run` (the instrumentation for a sanitized
    # run, the device link for `run.device`), the function is only who implements it
    sentinel_pass: object = None

    # the run's fields, read where the context is at hand
    policy = property(lambda self: self.run.policy)
    batch = property(lambda self: self.run.batch)
    resident = property(lambda self: self.run.resident)
    time_limit = property(lambda self: self.run.time_limit)
    step_budget = property(lambda self: self.run.step_budget)
    sanitize = property(lambda self: self.run.sanitize)


_state = threading.local()


_global_config: EmuConfig | None = None


def current() -> EmuConfig | None:
    """The config of the innermost `active()` block of this thread, else the process-wide
    one (or None). A block covers the thread that opened it only (`threads`); `set_global`
    covers every thread."""
    return getattr(_state, "config", None) or _global_config


def set_global(config: EmuConfig | None) -> None:
    """Make every FlyDSL launch of the process run here (`FLYDSL_LDSSAN=1`), or stop that."""
    global _global_config
    if config is not None:
        force_gfx1250()
        install()
    _global_config = config


def _compile_only() -> bool:
    return os.environ.get("COMPILE_ONLY", "0") not in ("", "0")


def _launching() -> bool:
    """A launch now runs here: a config is active and FlyDSL is not compiling only."""
    return current() is not None and not _compile_only()


def force_gfx1250() -> None:
    os.environ["FLYDSL_GPU_ARCH"] = "gfx1250"
    os.environ["ARCH"] = "gfx1250"


def digest_sources() -> list[str]:
    """The source files a cached build depends on: the instrumentation pass (`ldssan.passes`,
    with its IR reader) and the emulator's front end and translation (`ldssan.runtime.emu`).
    Not the engine, reports, tests or benchmarks: they never reach a compiled artifact."""
    import ldssan.passes

    out = []
    for top in (os.path.dirname(ldssan.passes.__file__), os.path.dirname(__file__)):
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out.extend(os.path.join(root, name) for name in sorted(files) if name.endswith(".py"))
    return out


def _source_digest(files: list[str] | None = None) -> str:
    """Hash of `files` (default: `digest_sources()`), names and contents: editing the pass or
    the emulator invalidates ldssan's FlyDSL cache entries, editing anything else does not."""
    h = hashlib.sha256(VERSION.encode())
    for path in digest_sources() if files is None else files:
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read())
    return h.hexdigest()[:12]


_DIGEST = None


def sentinel_fragment(run: RunConfig, locs: str | None = None) -> str:
    """The pipeline fragment standing for `run` in FlyDSL's pipeline, and so in its cache
    key: the fields that change a build (mode, the Python engine's ring, the device link),
    ldssan's version and source digest, and for sanitized builds the digest of the module's
    source locations (`locs`, which FlyDSL's key omits). Written here only; never read back
    (the pass manager takes the run from the context)."""
    global _DIGEST
    if _DIGEST is None:
        _DIGEST = _source_digest()
    parts = [f"v={VERSION}-{_DIGEST}", f"mode={'san' if run.sanitize else 'emu'}"]
    if run.ring is not None:
        parts.append(f"ring={run.ring}")
    dev = run.device
    if dev is not None:
        parts += [f"device={dev.digest}", f"ctx={dev.ring_addr:x}"]
        if dev.scratch:
            parts.append("scratch=1")
        if dev.hardware:
            parts.append("target=hw")
        if dev.process:
            parts.append(f"proc={dev.process}")
    if locs is not None:
        parts.append(f"locs={locs}")
    return f"{SENTINEL}{{{','.join(parts)}}}"


def install() -> None:
    """Patch FlyDSL's seams (idempotent; `uninstall` takes them out). They are inert unless
    a config is active. Also the raw builders' call lines (`install_locations`)."""
    install_locations()
    seam.install("frontend", _patches)


def uninstall() -> None:
    """Give FlyDSL its own seams back (the builders' call lines stay: `seam.uninstall`)."""
    seam.uninstall("frontend")


def install_locations() -> None:
    """FlyDSL's raw ROCDL builders carry the kernel's `def` line; the emulator's errors and
    the sanitizer's reports name the op's own line (`passes/locations.py`)."""
    seam.install("locations", locations.patches)


def _patches() -> list:
    from flydsl.compiler import jit_function as jf
    from flydsl.compiler.backends.rocm import RocmBackend

    return [
        (RocmBackend, "pipeline_fragments", _pipeline_fragments),
        (jf, "PassManager", _pass_manager),
        (jf, "_call_state_from_spec", _call_state_from_spec),
        # the launcher's parameter names, so an argument the emulator refuses is named
        (jf, "_build_call_spec", _named_call_spec),
        (jf.MlirCompiler, "prepare", _prepare),
        (jf, "CompiledArtifact", lambda _flydsls: _artifact_class()),
        (jf.JitFunction, "_compile_or_execute", _cached_launch),
        *calls.patches(jf, _launching),
    ]


def _device_build(cfg: "EmuConfig | None") -> bool:
    """A gfx1250 code object with the device runtime linked in (ldssan.runtime.device)
    (or, on hardware, one launched on a real gfx1250: runtime/device/hardware.py)."""
    dev = cfg.run.device if cfg is not None else None
    return dev is not None and (_compile_only() or dev.hardware)


def _pipeline_fragments(orig):
    def pipeline_fragments(self, *, compile_hints):
        frags = orig(self, compile_hints=compile_hints)
        cfg = current()
        device_build = _device_build(cfg)
        if (cfg is None or _compile_only()) and not device_build:
            # COMPILE_ONLY builds nothing to launch: FlyDSL's own pipeline, untouched
            return frags
        i = frags.index("convert-fly-to-rocdl")
        if frags[i + 1] != "canonicalize":
            raise RuntimeError("ldssan: FlyDSL's pipeline changed shape (no canonicalize after convert-fly-to-rocdl)")
        return [*frags[: i + 2], sentinel_fragment(cfg.run), *(frags[i + 2:] if device_build else [])]

    return pipeline_fragments


def _pass_manager(base_pm):
    class PassManager(base_pm):
        @classmethod
        def parse(cls, pipeline: str, *args, **kwargs):
            if SENTINEL + "{" not in pipeline:
                return base_pm.parse(pipeline, *args, **kwargs)
            return _split_pipeline(base_pm, pipeline)

    return PassManager


def _call_state_from_spec(orig):
    def call_state_from_spec(call_spec, artifact):
        if _is_emu_artifact(artifact):
            return EmuCallState(call_spec, artifact)
        return orig(call_spec, artifact)

    return call_state_from_spec


def _prepare(orig):
    orig_prepare = orig.__func__

    def prepare(cls, module, **kwargs):
        asm, pcfg = orig_prepare(cls, module, **kwargs)
        cfg = current()
        if cfg is not None and cfg.sanitize and cfg.scope is not None and not cfg.scope.covers(module_kernels(module)):
            # outside the scope: FlyDSL keys its caches on these fragments, so a plain build never
            # stands in for a checked one (nor the reverse)
            pcfg.fragments = unchecked_fragments(pcfg.fragments, sentinel_fragment(PLAIN))
        elif cfg is not None and cfg.sanitize:
            # FlyDSL's key omits locations; the site table bakes them in, so key on them too.
            located = module.operation.get_asm(enable_debug_info=True, assume_verified=True)
            digest = hashlib.sha256(located.encode()).hexdigest()[:12]
            plain = sentinel_fragment(cfg.run)
            pcfg.fragments = [sentinel_fragment(cfg.run, locs=digest) if f == plain else f for f in pcfg.fragments]
        return asm, pcfg

    return classmethod(prepare)


def _artifact_class():
    """FlyDSL's CompiledArtifact, keeping source locations in emulator artifacts (errors
    name the user's line). Module-level (`frontend.EmuArtifact`, made on first use so this
    module imports no FlyDSL), so FlyDSL's disk cache can pickle it: a warm process loads
    an ldssan build instead of compiling it again."""
    cls = globals().get("EmuArtifact")
    if cls is not None:
        return cls
    from flydsl.compiler.jit_executor import CompiledArtifact

    class EmuArtifact(CompiledArtifact):
        def __init__(self, compiled_module, *args, **kwargs):
            super().__init__(compiled_module, *args, **kwargs)
            if "ldssan.emu" in compiled_module.operation.attributes:
                self._ir_text = compiled_module.operation.get_asm(enable_debug_info=True)
                self._ldssan_emu = True

    EmuArtifact.__module__, EmuArtifact.__qualname__ = __name__, "EmuArtifact"
    globals()["EmuArtifact"] = EmuArtifact
    return EmuArtifact


def __getattr__(name: str):
    # unpickling an artifact from FlyDSL's disk cache looks the class up here
    if name == "EmuArtifact":
        return _artifact_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _split_pipeline(base_pm, pipeline: str):
    """`builtin.module(a,b,ldssan{...},c)` -> a pass manager running a,b, then the pass the
    active context names for the sentinel, then c (a device build's lowering). The sentinel
    is only located here: what it stands for is the context's `RunConfig`."""
    cfg = current()
    if cfg is None:
        raise RuntimeError("ldssan: a pipeline with the ldssan sentinel was parsed outside an ldssan run")
    inner = pipeline.strip()
    prefix = "builtin.module("
    if not inner.startswith(prefix) or not inner.endswith(")"):
        raise RuntimeError(f"ldssan: unexpected pipeline text {pipeline[:80]!r}")
    body = inner[len(prefix):-1]
    at = body.index(SENTINEL + "{")
    end = body.index("}", at) + 1
    before, after = body[:at].rstrip(","), body[end:].lstrip(",")
    # the plain fragment `prepare` put in for a module outside the run's scope: emulated, unchecked
    out_of_scope = body[at:end] == sentinel_fragment(PLAIN)
    device = cfg.run.device is not None and not out_of_scope
    if after and not device:
        raise RuntimeError("ldssan: passes after the ldssan sentinel are not supported")
    if device and cfg.sentinel_pass is None:  # a device build without its linker must not run as a plain one
        raise RuntimeError("ldssan device runtime: a device build with no link pass in its context")
    mode = "dev" if device else "emu" if out_of_scope or not cfg.sanitize else "san"
    pm = base_pm("builtin.module")
    if before:
        pm.add(before)
    pm.add(_mark_emu if out_of_scope else cfg.sentinel_pass or _mark_emu, name=f"ldssan-{mode}")
    if after:  # a device build's lowering (FlyDSL runs its pipeline as one text unless it dumps IR)
        pm.add(after)
    return pm


def _mark_emu(op, pass_) -> None:
    """The sentinel pass of plain emulation: only tags the module as emulator input."""
    from flydsl._mlir import ir

    op.attributes["ldssan.emu"] = ir.StringAttr.get(VERSION)


def _is_emu_artifact(artifact) -> bool:
    flag = getattr(artifact, "_ldssan_emu", None)
    if flag is None:
        head = artifact._ir_text[: artifact._ir_text.find("{") + 4000]
        flag = "ldssan.emu" in head
        artifact._ldssan_emu = flag
    return flag


_VIEWS: dict[str, tuple] = {}


@register_reset
def clear_caches() -> None:
    """Forget parsed artifact modules, launched specializations and the source digest
    (`ldssan.runtime.reset_caches`)."""
    global _DIGEST
    _VIEWS.clear()
    _LAUNCHES.clear()
    LAUNCH_STATS.update(hits=0, misses=0, unkeyed=0)
    _DIGEST = None


def _view_of(artifact):
    """Parse the artifact's module once per process (keyed by its text hash, which the
    artifact remembers: a relaunch does not hash the text again)."""
    key = getattr(artifact, "_ldssan_view_key", None)
    if key is None:
        key = artifact._ldssan_view_key = hashlib.sha256(artifact._ir_text.encode()).hexdigest()[:20]
    got = _VIEWS.get(key)
    if got is None:
        from flydsl.compiler.jit_function import _create_mlir_context
        from flydsl._mlir import ir

        with _create_mlir_context():
            module = ir.Module.parse(artifact._ir_text)
            got = (view_module(module), key)
        _VIEWS[key] = got
    return got


# --- launch cache: FlyDSL traces the launcher on every call (its own caches are keyed by the
# traced IR); a launch of a specialization this process already launched reuses the build.

_LAUNCHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # JitFunction -> {key: (flydsl key, artifact)}
LAUNCH_STATS = {"hits": 0, "misses": 0, "unkeyed": 0}  # since the last clear_caches()


def _cached_launch(orig):
    """Wraps `JitFunction._compile_or_execute`. Under an active config, a launch whose
    `_specialization` key was seen reuses that build: no trace, no module print, only the
    argument packing and the run. A hit also needs the artifact still in the function's
    in-memory cache, so code that empties `_mem_cache` to force a rebuild still gets one."""

    def compile_or_execute(self, args, kwargs, *, execute, return_compiled=False):
        cfg = current()
        if cfg is None and execute and threads.open_blocks:
            threads.check_covered()
        if cfg is None or not execute or _compile_only() or calls.tracing():
            return orig(self, args, kwargs, execute=execute, return_compiled=return_compiled)
        CALLS.count()
        if return_compiled:
            return calls.compiled(orig, self, args, kwargs)
        key, bound = specialization(self, args, kwargs, (sentinel_fragment(cfg.run), cfg.scope))
        hit = None if key is None else _LAUNCHES.get(self, {}).get(key)
        if hit is not None and self._mem_cache.get(hit[0]) is hit[1]:
            from flydsl.compiler.jit_function import _build_call_state

            LAUNCH_STATS["hits"] += 1
            self._last_compiled = hit
            args_tuple = tuple(bound.arguments.values())
            return _build_call_state(self._sig, args_tuple, hit[1])(args_tuple)
        LAUNCH_STATS["misses" if key is not None else "unkeyed"] += 1
        result = orig(self, args, kwargs, execute=execute, return_compiled=return_compiled)
        done = self._last_compiled
        if key is not None and done is not None and _is_emu_artifact(done[1]):
            _LAUNCHES.setdefault(self, {})[key] = done
        return result

    return compile_or_execute


class EmuCallState:
    """Stands in for FlyDSL's CallState: FlyDSL's own fills pack the arguments into their
    ctypes slots; the slots' bytes are decoded as the host function's parameter types."""

    def __init__(self, call_spec, artifact):
        self.spec = call_spec
        self.artifact = artifact
        params = getattr(call_spec, "param_names", None)
        self.slot_names = _slot_names(call_spec, params)

    def __call__(self, args_tuple):
        from flydsl.compiler.jit_executor import build_abi_storage

        cfg = current() or EmuConfig()
        storages, _packed = build_abi_storage([ct for _i, ct, _f in self.spec])
        for (i, _ct, fill), s in zip(self.spec, storages):
            if fill is not None:
                fill(args_tuple[i], s)
        raws = [ctypes.string_at(ctypes.addressof(s), ctypes.sizeof(s)) for s in storages]
        view, key = _view_of(self.artifact)
        entry = self.artifact._entry
        values = host_arguments(view, entry, raws, self.slot_names)
        gmem = GlobalMemory()
        params = getattr(self.spec, "param_names", None)
        _register_tensors(gmem, args_tuple, params)
        bind_pointers(gmem, view, entry, values, self.slot_names)
        sanitizer = None
        if "ldssan.sites" in view.attrs and cfg.sanitizer_factory is not None:
            sanitizer = cfg.sanitizer_factory(view.attrs["ldssan.sites"], entry, view)
        elif cfg.sanitize and cfg.scope is not None:  # built plain: outside the scope
            cfg.scope.skipped([(n, file_of(f.loc)) for n, f in view.functions.items() if f.is_kernel])
        launcher = Launcher(view, gmem, policy=cfg.policy, batch=cfg.batch, time_limit=cfg.time_limit,
                            step_budget=cfg.step_budget, ir_key=key, sanitizer=sanitizer, resident=cfg.resident,
                            native=cfg.run.native)
        try:
            memo.run_host(cfg.memo, launcher, entry, values, raws)
            cfg.launches.extend(launcher.records)
            if sanitizer is not None:
                sanitizer.finish()
                CALLS.checked_one()
        except Exception as exc:
            if cfg.on_fault is None:
                raise
            err = cfg.on_fault(exc, entry, sanitizer)  # recorded even if the caller catches it
            if err is exc:
                raise
            raise err  # its __cause__ (set by on_fault) is the original error
        return None


class _NamedSpec(tuple):
    """FlyDSL's slot spec tuple, carrying the launcher's parameter names for messages."""

    param_names: tuple[str, ...] = ()


def _named_call_spec(build):
    def build_call_spec(sig, args_tuple):
        spec = _NamedSpec(build(sig, args_tuple))
        spec.param_names = tuple(sig.parameters)
        return spec

    return build_call_spec


def _param_name(params, i: int) -> str:
    if i < 0:
        return "(stream)"  # the null stream FlyDSL appends when the launcher declares none
    return params[i] if params and i < len(params) else f"#{i}"


def _slot_names(spec, params) -> list[str]:
    """'A' for a parameter's first slot, 'A#1', 'A#2' for the rest (a dynamic-layout tensor
    has a pointer slot and a shape/stride slot; a struct one slot per field)."""
    names, seen = [], {}
    for i, _ct, _fill in spec:
        k = seen[i] = seen.get(i, -1) + 1
        base = _param_name(params, i)
        names.append(f"'{base}'" if k == 0 else f"'{base}#{k}'")
    return names


_REACH_DEPTH = 4  # argument -> wrapper / container -> field -> tensor, with room for nesting


def _register_tensors(gmem: GlobalMemory, args, params=None) -> None:
    """Register the CPU tensors among the arguments and reachable from them: sequences,
    dicts and object attributes (FlyDSL's tensor wrappers, struct fields), a few levels deep.
    A tensor argument on another device is an error; one found deeper is skipped (it is
    not this launch's memory, and a pointer into it fails in `bind_pointers`)."""
    import torch

    seen: set[int] = set()

    def visit(obj, name: str, depth: int) -> None:
        if isinstance(obj, torch.Tensor):
            if depth >= _REACH_DEPTH - 1 or in_host_memory(obj):
                gmem.add_tensor(obj, name=name)
            return
        if depth == 0 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)):
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            items = obj.items()
        elif isinstance(obj, (list, tuple)):
            items = enumerate(obj)
        elif hasattr(obj, "__dict__"):
            items = vars(obj).items()
        else:
            return
        for k, v in list(items):
            visit(v, f"{name}.{k}", depth - 1)

    for i, a in enumerate(args):
        visit(a, f"argument '{_param_name(params, i)}'", _REACH_DEPTH)


@contextmanager
def active(config: EmuConfig | None = None):
    """Run FlyDSL launches inside the block on the virtual gfx1250."""
    force_gfx1250()
    install()
    cfg = config or EmuConfig()
    prev = getattr(_state, "config", None)
    _state.config = cfg
    threads.enter_block()
    try:
        yield cfg
    finally:
        threads.leave_block()
        _state.config = prev

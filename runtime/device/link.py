"""Link the device runtime into an instrumented module: the `__ldssan_*` declarations the
pass left become definitions (hooks_ir.py), every hook call is inlined, and each kernel
zeroes its workgroup's shadow first. The result has no `__ldssan_*` call left and goes to
LLVM's AMDGPU backend.

For the virtual gfx1250 (`calls=True`) the hooks are instead defined once each, as
`llvm.func @ldssan_device_<hook>` in the gpu.module, and called: the same bodies, but a
module ~20x smaller (GEMM: 62 ds sites x 4000 lines inlined), which the emulator parses and
translates once per build. The prologue and the wave end (one site each, and the prologue
holds a barrier) stay inline.

The shadow goes to LDS after the kernel's own when it fits there and the kernel has no
dynamic LDS; else to a global scratch slot per workgroup, sized at each launch from the
kernel's LDS then (static + dynamic; layout.DESC). Fails closed (`DeviceLinkError`, naming
the site and its Python line): `rocdl.asyncmark` / `wait.asyncmark` (not in the device
runtime yet).
"""

from __future__ import annotations

import json
import re

from ldssan.passes.ir.errors import UsageError
from ldssan.passes.abi import WAIT_ASYNCMARK

from .hooks_ir import NOT_YET, Hooks
from .layout import ShadowLayout

LDS_LIMIT = 327680  # gfx1250 LDS per workgroup
MAX_WAVES = 32  # 1024 threads: used when a kernel does not state its block size
INIT = "__ldssan_init"
END = "__ldssan_end"  # before each gpu.return: the wave's end (LDS013, its final state)
COPY_HOOKS = ("__ldssan_dma", "__ldssan_tdm")
CALLED_PREFIX = "ldssan_device_"  # a called hook's definition (not `__ldssan_`: no Python-engine hook)


class DeviceLinkError(UsageError, RuntimeError):
    """The device runtime cannot be linked into this kernel; the message says why and where."""


def _ir():
    from flydsl._mlir import ir

    return ir


def _name(op) -> str:
    return str(op.attributes["sym_name"]).strip('"')


def _callee(op) -> str | None:
    if op.name != "llvm.call" or "callee" not in op.attributes:
        return None
    return str(op.attributes["callee"]).lstrip("@")


def _where(sites: list, site: int) -> str:
    s = sites[site] if 0 <= site < len(sites) else {}
    return f"site {site} ({s.get('op', '?')} at {s.get('file', '?')}:{s.get('line', '?')})"


def _site_of(call, operand: int = 0) -> int:
    m = re.search(r"arith\.constant (-?\d+) : i32", str(call.operands[operand].owner))
    return int(m.group(1)) if m else -1


def _lds_bytes(body, gpu_name: str) -> tuple[int, bool]:
    """Static LDS of the gpu.module, laid out as the emulator and LLVM lay it out
    (declaration order, each global at its alignment, the end rounded to 16), and whether
    it declares dynamic LDS (its size comes with each launch)."""
    from ldssan.passes.ir.types import byte_size, parse_type

    cur = 0
    dynamic = False
    for o in body.operations:
        op = o.operation
        if op.name != "llvm.mlir.global" or "addr_space" not in op.attributes:
            continue
        if int(str(op.attributes["addr_space"]).split(":")[0]) != 3:
            continue
        size = byte_size(parse_type(str(op.attributes["global_type"].value)))
        if size == 0:
            dynamic = True
            continue
        align = int(str(op.attributes["alignment"]).split(":")[0]) if "alignment" in op.attributes else 1
        cur = (cur + align - 1) // align * align + size
    return (cur + 15) // 16 * 16, dynamic


def _blocks(kernels) -> list[tuple[int, int, int] | None]:
    """Each kernel's known block size (FlyDSL states it), or None."""
    out = []
    for k in kernels:
        attr = k.attributes["known_block_size"] if "known_block_size" in k.attributes else None
        out.append(None if attr is None else tuple(int(x) for x in re.findall(r"\d+", str(attr).split(":", 1)[1])))
    return out


def _waves(blocks) -> int:
    if any(b is None for b in blocks):
        return MAX_WAVES
    return max(1, max(-(-(b[0] * b[1] * b[2]) // 32) for b in blocks))


_CALL = re.compile(r"^\s*llvm\.call @(?P<hook>__ldssan_\w+)\((?P<args>[^)]*)\)\s*:.*$")
_DECL = re.compile(r"^(?P<indent>\s*)llvm\.func @(?P<hook>__ldssan_\w+)\((?P<types>[^)]*)\).*$")
_NAME = re.compile(r"%([A-Za-z_][\w$.]*)")
_BARRIER = re.compile(r"\b(gpu\.barrier|rocdl\.s\.barrier)")


def _inline_text(text: str, bodies: dict, globals_: list, calls: bool = False) -> str:
    """Write each hook's body in place of its calls (parameters bound to the call's
    operands, the body's own names made unique per call), drop the declarations and add
    the runtime's globals (the shadow, the ring address) just before the first kernel
    (after the kernel's LDS globals). `calls`: every hook but the prologue and the end is
    instead defined once (at its declaration) and called (the module docstring).

    A textual inliner: MLIR's `inline` pass does not inline into gpu.func bodies in the
    MLIR FlyDSL 0.5.0 ships, and the bodies are our own text, so their names are known."""
    out: list[str] = []
    n = 0
    placed = False
    for line in text.splitlines():
        decl = _DECL.match(line)
        if decl:
            if calls and decl["hook"] in bodies and decl["hook"] not in (INIT, END):
                out.append(_definition(bodies[decl["hook"]], decl["types"], decl["indent"]))
            continue
        if not placed and line.lstrip().startswith("gpu.func "):
            # no shadow global in global scratch, no ring global in a bound build
            out += [g for g in globals_ if g]
            placed = True
        m = _CALL.match(line)
        if m is None:
            out.append(line)
            continue
        hook = bodies.get(m["hook"])
        if hook is None:
            raise DeviceLinkError(f"ldssan device runtime: no body for @{m['hook']}")
        args = [a.strip() for a in m["args"].split(",") if a.strip()]
        if len(args) != len(hook.params):
            raise DeviceLinkError(f"ldssan device runtime: @{m['hook']} called with {len(args)} operands, "
                                  f"its body takes {len(hook.params)}")
        if calls and m["hook"] not in (INIT, END):
            out.append(line.replace(f"@{m['hook']}(", f"@{CALLED_PREFIX}{m['hook'][len('__ldssan_'):]}(", 1))
            continue
        bind = dict(zip((p.lstrip("%") for p in hook.params), args))
        n += 1
        prefix = f"ldsd{n}_"
        out.append(_NAME.sub(lambda v: bind.get(v[1]) or f"%{prefix}{v[1]}", hook.text))
    if not placed:
        raise DeviceLinkError("ldssan device runtime: no gpu.func to link into")
    return "\n".join(out)


def _definition(hook, types: str, indent: str) -> str:
    """A hook's body as a function of its parameters (`calls` linking), at its declaration."""
    tys = [t.strip() for t in _split_types(types)]
    if len(tys) != len(hook.params):
        raise DeviceLinkError(f"ldssan device runtime: @{hook.name} declared with {len(tys)} parameters, "
                              f"its body takes {len(hook.params)}")
    if _BARRIER.search(hook.text):  # a called body runs under its caller's mask: no barrier in it
        raise DeviceLinkError(f"ldssan device runtime: @{hook.name}'s body holds a barrier; it cannot be called")
    params = ", ".join(f"{p}: {t}" for p, t in zip(hook.params, tys))
    name = CALLED_PREFIX + hook.name[len("__ldssan_"):]
    return (f"{indent}llvm.func @{name}({params}) attributes {{sym_visibility = \"private\"}} {{\n"
            f"{hook.text}\n{indent}  llvm.return\n{indent}}}")


def _split_types(types: str) -> list[str]:
    """`i32, vector<4xi32>, !llvm.ptr<3>` -> its types (commas inside <> do not split)."""
    out, depth, cur = [], 0, ""
    for ch in types:
        depth += ch in "<([{"
        depth -= ch in ">)]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [t for t in (*out, cur) if t.strip()]


def _refuse_marks(calls, sites) -> None:
    for c in calls:
        mark = _callee(c) in NOT_YET
        if mark or (_callee(c) == "__ldssan_wait" and _site_of(c, 1) in (WAIT_ASYNCMARK, -1)):
            what = f"@{_callee(c)}" if mark else "@__ldssan_wait (wait.asyncmark or a counter not constant)"
            raise DeviceLinkError(f"ldssan device runtime: {what} at {_where(sites, _site_of(c))}: asyncmark "
                                  "and wait.asyncmark are not in the device runtime yet")


def link(module_op, ring_addr: int, *, scratch: bool = False, calls: bool = False) -> dict:
    """Link the device runtime into `module_op` (instrumented, with `ldssan.sites`), in
    place. Returns {gpu.module name: layout dict}, also stored as `ldssan.device`.
    `scratch` puts the shadow in global scratch even where it would fit in LDS; `calls`
    defines the hooks once and calls them (the virtual gfx1250's form: module docstring)."""
    ir = _ir()
    from flydsl._mlir.dialects import llvm

    if "ldssan.sites" not in module_op.attributes:
        raise DeviceLinkError("ldssan device runtime: the module is not instrumented (no ldssan.sites)")
    sites = json.loads(module_op.attributes["ldssan.sites"].value)["sites"]
    layouts = {}
    hooks = None
    for gm in _gpu_modules(module_op):
        body = gm.regions[0].blocks[0]
        kernels = [o.operation for o in body.operations if o.operation.name == "gpu.func"]
        if not kernels:
            continue
        sites_called = [c for k in kernels for c in _hook_calls(k)]
        _refuse_marks(sites_called, sites)
        name = _name(gm)
        blocks = _blocks(kernels)
        static, dynamic = _lds_bytes(body, name)
        copies = any(_callee(c) in COPY_HOOKS for c in sites_called)
        lay = ShadowLayout(waves=_waves(blocks), sites=max(1, len(sites)), lds_bytes=static, copies=copies)
        if scratch or dynamic or lay.lds_bytes + lay.bytes > LDS_LIMIT:
            lay = ShadowLayout(lay.waves, lay.sites, static, copies=copies, scratch=True)
        hooks = Hooks(lay, ring_addr, blocks[0] if len(set(blocks)) == 1 else None)
        for k in kernels:  # the prologue at each kernel's entry, the end before each return
            with ir.InsertionPoint.at_block_begin(k.regions[0].blocks[0]), k.location:
                llvm.call(None, [], [], [], callee=INIT)
            for ret in _returns(k):
                with ir.InsertionPoint(ret), ret.location:
                    llvm.call(None, [], [], [], callee=END)
        layouts[name] = lay.to_dict()
    if len(layouts) != 1:
        raise DeviceLinkError(f"ldssan device runtime: links one gpu.module with kernels, found {len(layouts)}")
    text = module_op.get_asm(enable_debug_info=True, assume_verified=True)
    linked = ir.Module.parse(_inline_text(text, hooks.bodies(), [hooks.shadow_global(), hooks.ring_global()],
                                          calls))
    _replace_body(module_op, linked)
    module_op.attributes["ldssan.device"] = ir.StringAttr.get(json.dumps(layouts))
    return layouts


def _replace_body(module_op, linked) -> None:
    """A pass changes `module_op` in place: its ops are swapped for the linked ones."""
    block = module_op.regions[0].blocks[0]
    for o in list(block.operations):
        o.operation.erase()
    for o in list(linked.body.operations):
        block.append(o.operation)


def _returns(fn) -> list:
    out = []
    for region in fn.regions:
        for blk in region.blocks:
            out += [o.operation for o in blk.operations if o.operation.name == "gpu.return"]
    return out


def _hook_calls(fn) -> list:
    ir = _ir()
    out = []

    def visit(o):
        if (_callee(o.operation) or "").startswith("__ldssan_"):
            out.append(o.operation)
        return ir.WalkResult.ADVANCE

    fn.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def _gpu_modules(module_op):
    for region in module_op.regions:
        for blk in region.blocks:
            for o in blk.operations:
                if o.operation.name == "gpu.module":
                    yield o.operation

"""A small MLIR text writer for the device runtime's function bodies (arith / scf / llvm /
gpu / rocdl ops only: what both LLVM's AMDGPU backend and the virtual gfx1250 take).

Values are SSA names (str); every helper returns the name of its result. Constants are
written where used (MLIR's canonicalizer, run by the inliner, folds and hoists them).
"""

from __future__ import annotations

from contextlib import contextmanager

SHADOW = "__ldssan_shadow"


class Body:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._n = 0
        self._depth = 1
        self.scratch: str | None = None  # the slot's !llvm.ptr<1> when the shadow is in global scratch

    # -- plumbing
    def emit(self, text: str) -> None:
        self.lines.append("  " * self._depth + text)

    def let(self, rhs: str) -> str:
        self._n += 1
        name = f"%v{self._n}"
        self.emit(f"{name} = {rhs}")
        return name

    def text(self) -> str:
        return "\n".join(self.lines)

    # -- integers (i32 unless said)
    def c(self, value: int, ty: str = "i32") -> str:
        if ty == "i1":
            return self.let(f"arith.constant {'true' if value else 'false'}")
        return self.let(f"arith.constant {int(value)} : {ty}")

    def _bin(self, op: str, a: str, b: str, ty: str = "i32") -> str:
        return self.let(f"arith.{op} {a}, {b} : {ty}")

    def add(self, a, b, ty="i32"): return self._bin("addi", a, b, ty)
    def sub(self, a, b, ty="i32"): return self._bin("subi", a, b, ty)
    def mul(self, a, b, ty="i32"): return self._bin("muli", a, b, ty)
    def and_(self, a, b, ty="i32"): return self._bin("andi", a, b, ty)
    def or_(self, a, b, ty="i32"): return self._bin("ori", a, b, ty)
    def shl(self, a, b, ty="i32"): return self._bin("shli", a, b, ty)
    def shr(self, a, b, ty="i32"): return self._bin("shrui", a, b, ty)
    def umax(self, a, b, ty="i32"): return self._bin("maxui", a, b, ty)
    def umin(self, a, b, ty="i32"): return self._bin("minui", a, b, ty)

    def cmp(self, pred: str, a: str, b: str, ty: str = "i32") -> str:
        return self.let(f"arith.cmpi {pred}, {a}, {b} : {ty}")

    def select(self, cond: str, a: str, b: str, ty: str = "i32") -> str:
        return self.let(f"arith.select {cond}, {a}, {b} : {ty}")

    def not_(self, a: str) -> str:
        return self._bin("xori", a, self.c(1, "i1"), "i1")

    def all_(self, *conds: str) -> str:
        out = conds[0]
        for c in conds[1:]:
            out = self._bin("andi", out, c, "i1")
        return out

    def any_(self, *conds: str) -> str:
        out = conds[0]
        for c in conds[1:]:
            out = self._bin("ori", out, c, "i1")
        return out

    def index_i32(self, a: str) -> str:
        return self.let(f"arith.index_cast {a} : index to i32")

    # -- structured control flow (no results: state lives in memory)
    @contextmanager
    def if_(self, cond: str):
        self.emit(f"scf.if {cond} {{")
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self.emit("}")

    @contextmanager
    def for_(self, lo: str, hi: str, step: str | None = None):
        self._n += 1
        iv = f"%i{self._n}"
        step = step or self.c(1)
        self.emit(f"scf.for {iv} = {lo} to {hi} step {step} : i32 {{")
        self._depth += 1
        try:
            yield iv
        finally:
            self._depth -= 1
            self.emit("}")

    # -- shadow words (LDS, or the workgroup's global scratch slot)
    @property
    def _sp(self) -> str:
        return "!llvm.ptr<1>" if self.scratch else "!llvm.ptr<3>"

    def shadow_ptr(self, word: str) -> str:
        base = self.scratch or self.let(f"llvm.mlir.addressof @{SHADOW} : !llvm.ptr<3>")
        return self.let(f"llvm.getelementptr {base}[{word}] : ({self._sp}, i32) -> {self._sp}, i32")

    def ld(self, word: str) -> str:
        if self.scratch:
            return self.let(f"llvm.load {self.shadow_ptr(word)} atomic monotonic {{alignment = 4 : i64}} "
                            ": !llvm.ptr<1> -> i32")
        return self.let(f"llvm.load {self.shadow_ptr(word)} : {self._sp} -> i32")

    def st(self, word: str, value: str) -> None:
        if self.scratch:
            # global scratch: an atomic (monotonic) store -- seen by other waves at once, and
            # not a read-modify-write, which the virtual gfx1250 makes a scheduling point
            # (every shadow word would then be a place for other waves to interleave)
            self.emit(f"llvm.store {value}, {self.shadow_ptr(word)} atomic monotonic {{alignment = 4 : i64}} "
                      ": i32, !llvm.ptr<1>")
            return
        # an atomic swap, not a store: a plain ds store becomes visible to other waves only
        # when it completes (dscnt), an atomic at once -- on gfx1250 and on its emulator
        self.let(f"llvm.atomicrmw xchg {self.shadow_ptr(word)}, {value} monotonic : {self._sp}, i32")

    def gld(self, addr64: str, ty: str = "i32") -> str:
        """A load from global memory at an i64 address."""
        return self.let(f"llvm.load {self.global_ptr(addr64)} : !llvm.ptr<1> -> {ty}")

    def word(self, *parts) -> str:
        """Sum of word offsets: ints are folded, names added."""
        const = sum(p for p in parts if isinstance(p, int))
        out = None
        for p in parts:
            if isinstance(p, str):
                out = p if out is None else self.add(out, p)
        if out is None:
            return self.c(const)
        return self.add(out, self.c(const)) if const else out

    # -- global memory (the record buffer)
    def global_ptr(self, addr64: str) -> str:
        return self.let(f"llvm.inttoptr {addr64} : i64 to !llvm.ptr<1>")

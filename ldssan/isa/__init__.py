"""ISA-level checks on the linked gfx1250 code object (`ldssan isa-check`, rules LDS050..).

    toolchain  ld.lld from the ziglang dependency, and the compile-only build environment
    capture    run a callable, keep every kernel build's ELF and final ISA
    asm        the ISA text as instructions with source lines and byte offsets
    cfg        basic blocks and branches
    counters   per-counter (dscnt, loadcnt, storecnt, asynccnt, tensorcnt) may-outstanding analysis
    check      LDS050 store in flight at s_barrier_signal, LDS051 wait below the IR's intent; registers: LDS052
    intent     what each hand-written IR wait retires on every path, and ISA waits that do not (LDS051's analysis)
    output     text and JSON; violations: findings as the sanitizer's Violations (its JSON, SARIF)
    sanitized  FLYDSL_LDSSAN_ISA: findings of an uninstrumented build added to a sanitized launch's report
    compare    the ISA verdict next to the sanitizer's; cli, run
"""

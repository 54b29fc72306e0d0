"""Reading MLIR: a parsed module as plain Python objects (`irview`) and MLIR type text
parsed into numpy layouts (`types`).

The bottom layer of ldssan: the instrumentation pass (site table, operand types) and the
virtual gfx1250 (translation) both read IR through it, so neither depends on the other.
Being the bottom, it also holds what every layer shares: the error family (`errors`:
`LdssanError`) and the registry of module-level caches (`caches`).
"""

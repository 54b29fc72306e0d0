"""Errors of the happens-before engine itself (never of the user's kernel)."""

from __future__ import annotations

from ldssan.passes.ir.errors import LdssanError


class ShadowInternalError(LdssanError, RuntimeError):
    """An invariant of the shadow broke: an ldssan bug, reported as such (never a bare
    KeyError, never a clean verdict)."""

    def __init__(self, detail: str):
        super().__init__(f"ldssan: internal error in the LDS shadow: {detail}")


class ShadowLimitError(LdssanError, RuntimeError):
    """A launch went past a fixed bound of the shadow (its event ids, its phase counters):
    refused by name rather than wrapped."""

    def __init__(self, detail: str):
        super().__init__(f"ldssan: the LDS shadow's limit: {detail}")

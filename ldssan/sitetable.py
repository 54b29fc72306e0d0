"""The site table: what each instrumented op is and where the user wrote it, plus the
kernel's LDS buffers, named by the Python variable they were allocated into.

Built by the pass (`passes/sites.py`), read here fail-closed: a table that is not the
documented shape (see `ldssan.decode`) is a `SiteTableError` naming the entry and field.

Columns: the table stores FlyDSL's columns (Python `col_offset`, 0-based); everything
printed (`location`, the text report, SARIF) is 1-based, as compilers print them.

Variants (`ldssan.variants`): a site keeps the file that ran (the temporary variant), so
its identity is that build's; what is printed (`location`) and the JSON name the original
file, the JSON adding `variant: {file, changes: [{line, old, new}]}`, which reading it back
restores.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ldssan.passes.ir.caches import register_cache
from ldssan.passes.ir.errors import UsageError
from ldssan.runtime.records import NO_SITE
from ldssan.variants import Origin, origin_of, original_path, register_origin

__all__ = [
    "ACCESS_KINDS",
    "SITE_KINDS",
    "UNKNOWN_KIND",
    "Frame",
    "Site",
    "LdsBuffer",
    "SiteTable",
    "SiteTableError",
    "allocation_target",
]

# Site kinds that touch LDS bytes (they have a size and an LDS offset in a report).
ACCESS_KINDS = frozenset(
    {"ds_read", "ds_write", "ds_atomic", "dma_to_lds", "dma_from_lds", "tdm_load", "tdm_store"}
)
# Every kind the instrumentation pass emits; other strings are kept, printed as-is.
SITE_KINDS = ACCESS_KINDS | {"wait", "mark", "barrier", "fence"}
# Kind of the placeholder site that stands in for an unknown id.
UNKNOWN_KIND = "unknown"


class SiteTableError(UsageError, ValueError, TypeError):
    """A site table that is not the documented shape. Also a TypeError, for callers that
    treat a table of the wrong type as one."""


def _obj(d: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise SiteTableError(f"ldssan: malformed site table: {what} is a {type(d).__name__}, "
                             f"not a JSON object: {d!r:.80}")
    return d


def _list(v: Any, what: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise SiteTableError(f"ldssan: malformed site table: {what} is a {type(v).__name__}, "
                             f"not a JSON list: {v!r:.80}")
    return v


def _where(file: str, line: int, col: int) -> str:
    return f"{original_path(file)}:{line}:{col + 1}"  # stored 0-based, printed 1-based


def _file_json(file: str | None) -> dict[str, Any]:
    """`{"file": original}` and, for a variant file, `variant: {file, changes}`."""
    origin = origin_of(file)
    if origin is None:
        return {"file": file}
    changes = [{"line": n, "old": old, "new": new} for n, old, new in origin.changes]
    return {"file": origin.path, "variant": {"file": file, "changes": changes}}


def _file_from_json(d: Mapping[str, Any], what: str) -> str | None:
    """The file that ran: the variant's when the entry names one (its origin is then
    registered, so this process prints it as the original file too)."""
    file = d.get("file")
    file = None if file is None else str(file)
    variant = d.get("variant")
    if variant is None:
        return file
    variant = _obj(variant, f"the variant of {what}")
    try:
        changes = tuple((int(c["line"]), str(c["old"]), str(c["new"]))
                        for c in (_obj(c, "a variant change") for c in _list(variant.get("changes"), "changes")))
        path = str(variant["file"])
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise SiteTableError(f"ldssan: malformed variant of {what} {dict(variant)!r:.200}: {e!r}") from e
    if file is None:
        raise SiteTableError(f"ldssan: malformed site table: {what} has a variant but no original file")
    register_origin(path, Origin(file, changes))
    return path


# -- allocation names ------------------------------------------------------------------


@register_cache
@lru_cache(maxsize=64)
def _assignments(path: str, _mtime: float) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, target) of every single-target assignment in the file."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if isinstance(target, (ast.Name, ast.Attribute, ast.Subscript)):
            out.append((node.lineno, node.end_lineno or node.lineno, ast.unparse(target)))
    return tuple(out)


def allocation_target(file: str | None, line: int | None) -> str | None:
    """The variable an allocation on `file:line` was assigned to (`partial` in
    `partial = alloc.allocate(...)`), or None when the line is not one assignment
    statement (a helper that returns the allocation, a tuple target, no source)."""
    if not file or not line:
        return None
    try:
        mtime = os.stat(file).st_mtime
    except OSError:
        return None
    spans = [(last - first, target) for first, last, target in _assignments(file, mtime)
             if first <= line <= last]
    return min(spans)[1] if spans else None  # the innermost statement covering the line


# -- sites -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python source frame of a site's call chain."""

    file: str
    line: int
    col: int = 0  # 0-based, as stored
    function: str = ""

    @property
    def location(self) -> str:
        """`file:line:col`, column 1-based."""
        return _where(self.file, self.line, self.col)

    def to_dict(self) -> dict[str, Any]:
        return {**_file_json(self.file), "line": self.line, "col": self.col, "function": self.function}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Frame":
        file = _file_from_json(d, "a chain frame") if "variant" in d else d["file"]
        return cls(str(file), int(d["line"]), int(d.get("col", 0)), str(d.get("function", "")))


@dataclass(frozen=True, slots=True)
class Site:
    """An instrumented op: what it is and where the user wrote it (innermost user frame)."""

    id: int
    kind: str  # one of SITE_KINDS, or UNKNOWN_KIND for a placeholder
    op: str  # MLIR op name, e.g. "llvm.store", "rocdl.s.wait.tensorcnt"
    file: str
    line: int
    col: int = 0  # 0-based, as stored
    function: str = ""
    chain: tuple[Frame, ...] = ()  # innermost first
    text: str = ""  # the source line
    buffer: str | None = None  # LDS buffer the pass attributed the op to, if known
    bytes: int = 0  # bytes per lane (ds/dma) or footprint (tdm); 0 = unknown

    @classmethod
    def placeholder(cls, site_id: int) -> "Site":
        """Stand-in for an id the table does not have; prints as `<unknown site N>`."""
        label = "<no site>" if site_id == NO_SITE else f"<unknown site {site_id}>"
        return cls(site_id, UNKNOWN_KIND, "", label, 0)

    @property
    def known(self) -> bool:
        return self.kind != UNKNOWN_KIND

    @property
    def is_access(self) -> bool:
        return self.kind in ACCESS_KINDS

    @property
    def location(self) -> str:
        """`file:line:col` (column 1-based), or the placeholder label for an unknown site."""
        if not self.known:
            return self.file
        return _where(self.file, self.line, self.col)

    @property
    def short_location(self) -> str:
        """`file:line` (the SUMMARY form)."""
        return self.file if not self.known else f"{original_path(self.file)}:{self.line}"

    @property
    def origins(self) -> tuple[Origin, ...]:
        """The variants this site's file and call chain were written in (a report shows
        their edits), each once."""
        if not self.known:
            return ()
        found = (origin_of(f) for f in dict.fromkeys([self.file, *(fr.file for fr in self.chain)]))
        return tuple(dict.fromkeys(o for o in found if o is not None))

    @property
    def callers(self) -> tuple[Frame, ...]:
        """The call chain without the site's own frame: callers only, innermost first."""
        chain = self.chain
        own = (self.file, self.line, self.col)
        if chain and (chain[0].file, chain[0].line, chain[0].col) == own:
            chain = chain[1:]
        return chain

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "op": self.op, **_file_json(self.file),
            "line": self.line, "col": self.col, "function": self.function,
            "chain": [f.to_dict() for f in self.chain], "text": self.text,
            "buffer": self.buffer, "bytes": self.bytes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Site":
        d = _obj(d, "a site entry")
        try:
            buf = d.get("buffer")
            site = cls(
                id=int(d["id"]), kind=str(d["kind"]), op=str(d.get("op", "")),
                file=str(_file_from_json(d, "a site entry") if "variant" in d else d["file"]),
                line=int(d["line"]), col=int(d.get("col", 0)),
                function=str(d.get("function", "")),
                chain=tuple(Frame.from_dict(_obj(f, "a chain frame"))
                            for f in _list(d.get("chain"), "chain")),
                text=str(d.get("text") or ""), buffer=None if buf is None else str(buf),
                bytes=int(d.get("bytes") or 0),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise SiteTableError(f"ldssan: malformed site table entry {dict(d)!r:.200}: {e!r}") from e
        if not 0 <= site.id < NO_SITE:  # ids are u32 in a record; NO_SITE means "none"
            raise SiteTableError(f"ldssan: malformed site table entry: id {site.id} is outside "
                                 f"0..{NO_SITE - 1}")
        return site


@dataclass(frozen=True, slots=True)
class LdsBuffer:
    """A named LDS region of the workgroup's allocation. size 0 = extent unknown.

    `name` is what a report calls it: the Python variable the kernel allocated it into
    when the allocation line says (`partial`), else the module's `symbol`
    (`__shared_alloc_0`). `file`/`line` are the allocation's source line, if known."""

    name: str
    offset: int
    size: int
    symbol: str = ""  # the module symbol, when `name` is the variable ("" = same as name)
    file: str | None = None
    line: int = 0

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def allocated_at(self) -> str | None:
        return f"{original_path(self.file)}:{self.line}" if self.file and self.line else None

    def contains(self, lds_offset: int) -> bool:
        return self.offset <= lds_offset < self.end

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "offset": self.offset, "size": self.size,
                "symbol": self.symbol, **_file_json(self.file), "line": self.line}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LdsBuffer":
        """An entry with a `symbol` is already named (a decoded report read back); one
        without is the runtime's (`name` = the module symbol): it is named here by the
        variable on its allocation line."""
        d = _obj(d, "a buffer entry")
        try:
            name, offset, size = str(d["name"]), int(d["offset"]), int(d.get("size") or 0)
            file = _file_from_json(d, "a buffer entry")
            line = int(d.get("line") or 0)
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise SiteTableError(f"ldssan: malformed LDS buffer entry {dict(d)!r:.200}: {e!r}") from e
        symbol = d.get("symbol")
        if symbol is None:  # the runtime's entry: `name` is the module symbol
            var = allocation_target(file, line)
            symbol, name = ("", name) if var is None else (name, var)
        return cls(name, offset, size, str(symbol), file, line)


class SiteTable(Mapping[int, Site]):
    """Site id -> `Site`, plus the kernel's LDS buffers and (optionally) its name."""

    __slots__ = ("_sites", "buffers", "kernel")

    def __init__(self, sites: Iterable[Site] = (), buffers: Iterable[LdsBuffer] = (),
                 kernel: str = ""):
        self._sites: dict[int, Site] = {}
        for s in sites:
            if s.id in self._sites:
                raise SiteTableError(f"ldssan: duplicate site id {s.id} in the site table")
            self._sites[s.id] = s
        self.buffers: list[LdsBuffer] = list(buffers)
        self.kernel = kernel

    # Mapping protocol
    def __getitem__(self, site_id: int) -> Site:
        return self._sites[site_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SiteTable):
            return NotImplemented
        mine = (self._sites, self.buffers, self.kernel)
        return mine == (other._sites, other.buffers, other.kernel)

    __hash__ = None  # type: ignore[assignment]  # mutable buffers list

    def __repr__(self) -> str:
        return f"SiteTable(kernel={self.kernel!r}, sites={len(self)}, buffers={len(self.buffers)})"

    @property
    def build(self) -> str:
        """A short digest naming this compiled specialization: two builds of one kernel
        name (other constexprs, another variant) have different sites, so their site ids
        mean different ops and their reports must not merge."""
        h = hashlib.sha256()
        for s in sorted(self._sites.values(), key=lambda s: s.id):
            h.update(f"{s.id}:{s.kind}:{s.file}:{s.line}:{s.col}\n".encode())
        return h.hexdigest()[:12]

    def resolve(self, site_id: int) -> Site:
        """The site with this id, or a `<unknown site N>` placeholder; never raises."""
        site = self._sites.get(site_id)
        return site if site is not None else Site.placeholder(site_id)

    def buffer_at(self, lds_offset: int) -> LdsBuffer | None:
        """The smallest buffer containing the offset (buffers may nest, e.g. struct fields);
        failing that, the open-ended (size 0) buffer starting closest below it."""
        sized = [b for b in self.buffers if b.size > 0 and b.contains(lds_offset)]
        if sized:
            return min(sized, key=lambda b: b.size)
        open_ended = [b for b in self.buffers if b.size == 0 and b.offset <= lds_offset]
        return max(open_ended, key=lambda b: b.offset) if open_ended else None

    # JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "sites": [s.to_dict() for s in self._sites.values()],
            "buffers": [b.to_dict() for b in self.buffers],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, data: str | bytes | list | dict) -> "SiteTable":
        """Parse JSON text, a list of site objects, or the `{kernel, sites, buffers}` dict."""
        if isinstance(data, (str, bytes, bytearray)):
            try:
                data = json.loads(data)
            except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, too deep
                raise SiteTableError(f"ldssan: site table is not valid JSON: {e}") from e
        if isinstance(data, list):
            return cls(Site.from_dict(d) for d in data)
        if isinstance(data, dict):
            return cls(
                (Site.from_dict(d) for d in _list(data.get("sites"), "sites")),
                (LdsBuffer.from_dict(b) for b in _list(data.get("buffers"), "buffers")),
                kernel=str(data.get("kernel") or ""),
            )
        raise SiteTableError(f"ldssan: a site table is a JSON list or object, got {type(data).__name__}")

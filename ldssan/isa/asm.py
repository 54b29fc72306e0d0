"""Read a kernel's final ISA text (FlyDSL's `NN_final_isa.s`): its instructions in order,
labels, and each instruction's source line from the `.file` / `.loc` line table.

Byte offsets: the assembly text has none, so the kernel body is re-assembled with
`-show-encoding` (ziglang's clang, the package that provides ld.lld) and the encodings'
lengths are summed; the total is checked against the kernel symbol's size in the linked
ELF, and offsets are dropped (None) when they disagree, never guessed.
"""

from __future__ import annotations

import re
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ldssan.passes.ir.errors import UsageError
from ldssan.runtime.zig import zig_command


class IsaParseError(UsageError, ValueError):
    """ISA text ldssan cannot read: names the line and what is wrong."""


@dataclass(frozen=True)
class Instr:
    index: int  # position in the kernel body
    mnemonic: str
    operands: tuple[str, ...]
    text: str  # the instruction as written
    asm_line: int  # 1-based line in the ISA text
    file: str | None  # source file of the innermost `.loc` (None: the compiler gave line 0)
    line: int | None
    col: int | None
    offset: int | None = None  # byte offset from the kernel symbol

    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.file else "<no source line>"

    def at(self) -> str:
        return f"+0x{self.offset:x}" if self.offset is not None else f"asm line {self.asm_line}"


@dataclass(frozen=True)
class Kernel:
    name: str
    instrs: tuple[Instr, ...]
    labels: dict[str, int]  # label -> index of the instruction it precedes


_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?')
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)")
_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):")


def parse_kernel(isa: str, kernel: str) -> Kernel:
    """The body of `kernel` (from its label to `.Lfunc_end*`) as instructions."""
    files: dict[str, str] = {}
    loc: tuple[str | None, int | None, int | None] = (None, None, None)
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    inside = False
    for n, raw in enumerate(isa.splitlines(), 1):
        line = raw.split(";", 1)[0].rstrip()
        if (m := _FILE.match(line)):
            files[m.group(1)] = str(Path(m.group(2)) / m.group(3)) if m.group(3) else m.group(2)
            continue
        if (m := _LABEL.match(line)):
            name = m.group(1)
            if name == kernel:
                inside = True
            elif inside and name.startswith(".Lfunc_end"):
                break
            elif inside:
                labels[name] = len(instrs)
            continue
        if not inside or not line.strip():
            continue
        if (m := _LOC.match(line)):
            fid, ln, col = m.group(1), int(m.group(2)), int(m.group(3))
            if fid not in files:
                raise IsaParseError(f"ISA line {n}: .loc names file {fid}, which no .file declared")
            # Line 0 is the compiler's "no source line"; keep it as unknown, not as a guess.
            loc = (files[fid], ln, col) if ln else (None, None, None)
            continue
        if line.lstrip().startswith("."):
            continue
        text = line.strip()
        mnemonic, _, rest = text.partition(" ")
        operands = tuple(o.strip() for o in rest.split(",")) if rest.strip() else ()
        instrs.append(Instr(len(instrs), mnemonic, operands, text, n, *loc))
    if not inside:
        raise IsaParseError(f"the ISA has no label `{kernel}:`")
    if not instrs:
        raise IsaParseError(f"kernel {kernel}: no instructions")
    return Kernel(kernel, tuple(instrs), labels)


def _symbol_size(elf: bytes, name: str) -> int | None:
    """st_size of symbol `name` in a little-endian ELF64 (None if absent or not ELF64)."""
    if elf[:5] != b"\x7fELF\x02":
        return None
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 24):
            st_name, _, _, _, _, st_size = struct.unpack_from("<IBBHQQ", elf, off)
            start = strtab[4] + st_name
            if elf[start:elf.index(b"\0", start)].decode() == name:
                return st_size
    return None


_ENC = re.compile(r"encoding: \[([^\]]*)\]")


def _encoded_lengths(kernel: Kernel) -> list[int] | None:
    body = [".text", f"{kernel.name}:"]
    by_index = {i: name for name, i in kernel.labels.items()}
    for ins in kernel.instrs:
        if ins.index in by_index:
            body.append(f"{by_index[ins.index]}:")
        body.append("\t" + ins.text)
    body += [f"{n}:" for n, i in kernel.labels.items() if i == len(kernel.instrs)]
    with tempfile.TemporaryDirectory(prefix="ldssan-isa-enc-") as d:
        src = Path(d) / "k.s"
        src.write_text("\n".join(body) + "\n")
        cmd = [*zig_command(), "clang", "-cc1as", "-triple", "amdgcn-amd-amdhsa",
               "-target-cpu", "gfx1250", "-show-encoding", "-filetype", "asm", str(src),
               "-o", str(Path(d) / "k.enc")]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0:
            return None
        lengths = [len(m.group(1).split(",")) for m in _ENC.finditer((Path(d) / "k.enc").read_text())]
    return lengths if len(lengths) == len(kernel.instrs) else None


def with_offsets(kernel: Kernel, elf: bytes) -> tuple[Kernel, str | None]:
    """The kernel with byte offsets, or unchanged plus the reason offsets are unavailable."""
    size = _symbol_size(elf, kernel.name)
    lengths = _encoded_lengths(kernel)
    if lengths is None:
        return kernel, "the kernel could not be re-assembled to measure instruction sizes"
    if size is None or sum(lengths) != size:
        return kernel, f"re-assembled size {sum(lengths)} != symbol size {size} in the ELF"
    offsets, at = [], 0
    for n in lengths:
        offsets.append(at)
        at += n
    instrs = tuple(Instr(**{**ins.__dict__, "offset": off}) for ins, off in zip(kernel.instrs, offsets))
    return Kernel(kernel.name, instrs, kernel.labels), None

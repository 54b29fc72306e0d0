"""Memory of the virtual gfx1250: the caller's tensors as global memory, and LDS.

Global memory is the host memory of the launch's CPU tensors, viewed in place (results
land in the tensors). Every access is checked against the registered regions: an address
outside every tensor is an error naming the address, never a silent host read.

Raw addresses (`from_c_void_p(t.data_ptr())`, addresses the kernel builds with
`llvm.inttoptr`) are resolved against memory provably owned by the process's torch
tensors, never against arbitrary host memory: `PROCESS_TENSORS` remembers (weakly) every
CPU tensor storage an emulated launch has seen, and only when an address misses all of
them does it walk the live objects once (`gc.get_objects()`, tens of milliseconds, so
never on the common path) for CPU tensors whose storage holds it.

LDS is one flat byte array per batch: workgroup g of the batch owns bytes
[g*lds_bytes, (g+1)*lds_bytes). LDS pointers in the kernel are offsets within the
workgroup's LDS; the per-lane group base is added here.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import gc
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from ldssan.passes.ir.caches import register_cache, register_reset
from ldssan.passes.ir.errors import LdssanError


class EmuMemoryError(LdssanError, RuntimeError):
    pass


@dataclass
class Region:
    base: int
    size: int
    view: np.ndarray  # uint8, writable, aliases the tensor's storage (bool: a written-byte mask)
    name: str
    _spans: dict = field(default_factory=dict, repr=False, compare=False)

    def spans(self, nbytes: int, width: int) -> tuple[int, np.ndarray]:
        """(head, a view of the region as overlapping `nbytes`-byte elements starting every
        `width` bytes from its first `width`-aligned address): a gather of whole lanes with
        one index per lane instead of one per byte (the same bytes, several times faster)."""
        got = self._spans.get((nbytes, width))
        if got is None:
            head = -self.base % width
            got = self._spans[(nbytes, width)] = (head, spans(self.view[head:], nbytes, width))
        return got


def spans(data: np.ndarray, nbytes: int, width: int = 1) -> np.ndarray:
    """A view of the bytes `data` as overlapping `nbytes`-byte elements, one starting every
    `width` bytes: element i is data[i*width : i*width + nbytes]. Gathering or scattering
    whole elements (a lane's bytes, a row) takes one index each instead of one per byte."""
    n = max(0, (data.size - nbytes) // width + 1)
    return np.ndarray((n,), np.dtype((np.void, nbytes)), buffer=data, offset=0, strides=(width,))


def in_host_memory(tensor) -> bool:
    """Whether a tensor's bytes are host memory. Asked of the storage, not `tensor.device`:
    torch's virtual GPU (ldssan.vdevice) reports cuda:0 for tensors that live in host memory."""
    try:
        return tensor.untyped_storage().device.type == "cpu"
    except (RuntimeError, NotImplementedError, TypeError):
        return False  # sparse / nested: no single storage the kernel could address


class GlobalMemory:
    """The regions a launch may touch. With `reach_process` set, an access that misses them
    may still land in any live CPU tensor of the process (`PROCESS_TENSORS`): for launches
    that pass or build raw addresses; launches of tensors only keep the strict check, so an
    out-of-bounds access there stays an error even when it happens to hit another tensor."""

    def __init__(self) -> None:
        self.regions: list[Region] = []
        self._bases: list[int] = []
        self._hot: Region | None = None  # the region the last located access fell in
        self.reach_process = False
        # What a tracked call (`track()`, the launch memo) touched: the base of every region
        # any access read (whole regions: coarse and conservative), and per written region
        # a byte mask of what `write` stored: a bool `Region` at the region's base, so a
        # store's own span indices address it too (`_mark_written`)
        self.tracking = False
        self.read_bases: set[int] = set()
        self._masks: dict[int, Region] = {}

    @property
    def written(self) -> dict[int, np.ndarray]:
        """Per written region's base, the bool mask of the bytes tracked stores wrote."""
        return {base: m.view for base, m in self._masks.items()}

    def track(self) -> None:
        """Record from now on which regions are read and which bytes are written."""
        self.tracking = True
        self.read_bases = set()
        self._masks = {}

    def release_masks(self) -> None:
        """The caller is done with `written`: its masks go back to the pool (`MASKS`)."""
        for m in self._masks.values():
            MASKS.give(m.view)
        self._masks = {}

    def add(self, base: int, size: int, name: str = "") -> None:
        if size <= 0 or base == 0:
            return
        for r in self.regions:
            if r.base <= base < r.base + r.size and base + size <= r.base + r.size:
                return  # a view of a region we already have
        view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(base))
        i = bisect.bisect(self._bases, base)
        self._bases.insert(i, base)
        self.regions.insert(i, Region(base, size, view, name))
        self._hot = None  # `find` may now answer another region for the same bytes

    def add_tensor(self, tensor, name: str = "") -> None:
        if not in_host_memory(tensor):
            raise EmuMemoryError(
                f"the virtual gfx1250 runs on CPU tensors; {name or 'an argument'} is on {tensor.device}")
        storage = tensor.untyped_storage()
        self.add(storage.data_ptr(), storage.nbytes(), name)
        PROCESS_TENSORS.remember(tensor)

    def find(self, addr: int, nbytes: int = 1) -> Region | None:
        i = bisect.bisect(self._bases, addr) - 1
        if i >= 0:
            r = self.regions[i]
            if addr + nbytes <= r.base + r.size:
                return r
        return None

    def add_process_tensor(self, addr: int, nbytes: int, name: str) -> Region | None:
        """Register the storage of the live CPU tensor holding [addr, addr+nbytes), if any."""
        hit = PROCESS_TENSORS.storage_at(addr, nbytes)
        if hit is None:
            return None
        base, size, what = hit
        self.add(base, size, f"{name} ({what})")
        return self.find(addr, nbytes)

    def region_of(self, addr: int, nbytes: int) -> Region:
        r = self.find(addr, nbytes)
        if r is None and self.reach_process:
            r = self.add_process_tensor(addr, nbytes, "raw address")
        if r is not None:
            return r
        where = ("every live CPU torch tensor of the process" if self.reach_process
                 else "every tensor of the launch")
        raise EmuMemoryError(f"global memory access of {nbytes} bytes at 0x{addr:x} is outside {where}")

    def locate(self, addr: np.ndarray, nbytes: int) -> tuple[Region, np.ndarray]:
        """The region all `addr` fall in, and their offsets into it (one region per access).
        The region counts as read (a caller of `locate` may read the view: atomics)."""
        r, off = self._locate(addr, nbytes)
        if self.tracking:
            self.read_bases.add(r.base)
        return r, off

    def _locate(self, addr: np.ndarray, nbytes: int) -> tuple[Region, np.ndarray]:
        r = self._hot
        if r is not None:
            # the common case, one reduction: every lane in the region of the last access (a
            # negative offset wraps past any size as unsigned); the same answer `find` gives
            off = addr - r.base
            if off.view(np.uint64).max() <= r.size - nbytes:
                return r, off
        r, off = self._locate_slow(addr, nbytes)
        self._hot = r
        return r, off

    def _locate_slow(self, addr: np.ndarray, nbytes: int) -> tuple[Region, np.ndarray]:
        lo = int(addr.min())
        hi = int(addr.max())
        r = self.region_of(lo, nbytes)
        if hi + nbytes > r.base + r.size:
            # Lanes spread over several tensors: rare; check each lane.
            for a in np.unique(addr):
                self.region_of(int(a), nbytes)
            raise EmuMemoryError("a single global access spans several tensors; not supported")
        return r, addr - r.base

    def read(self, addr: np.ndarray, dtype: np.dtype, count: int = 1) -> np.ndarray:
        """Gather `count` elements of `dtype` at each address -> (n, count) array."""
        nb = dtype.itemsize * count
        r, off = self.locate(addr, nb)
        arr, idx = _lane_spans(r, off, nb)
        return arr[idx].view(np.uint8).view(dtype).reshape(len(addr), count)

    def read_rows(self, addr: int, rows: int, row_bytes: int, stride: int) -> np.ndarray | None:
        """`rows` rows of `row_bytes` bytes, `stride` bytes apart from `addr` (a tile), as one
        (rows, row_bytes) copy; None when they are not all in one registered region (`read`
        then resolves the addresses or names the one at fault)."""
        if rows <= 0 or row_bytes <= 0 or stride < 0:
            return None
        r = self.find(addr, (rows - 1) * stride + row_bytes)
        if r is None:
            return None
        if self.tracking:
            self.read_bases.add(r.base)
        return np.ndarray((rows, row_bytes), np.uint8, buffer=r.view, offset=addr - r.base,
                          strides=(stride, 1)).copy()

    def write(self, addr: np.ndarray, data: np.ndarray) -> None:
        """Scatter rows of `data` (n, k) of some dtype at `addr` (n,)."""
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(len(addr), -1)
        r, off = self._locate(addr, raw.shape[1])  # a store reads nothing
        arr, idx = _lane_spans(r, off, raw.shape[1])
        arr[idx] = raw.view(arr.dtype).reshape(len(addr))
        if self.tracking:
            self._mark_written(r, idx, raw.shape[1], arr.strides[0])

    def written_mask(self, r: Region) -> Region:
        """The written-byte mask of region `r` (made on its first store while tracking)."""
        mask = self._masks.get(r.base)
        if mask is None:
            mask = self._masks[r.base] = Region(r.base, r.size, MASKS.take(r.size), r.name)
        return mask

    def _mark_written(self, r: Region, idx: np.ndarray, nbytes: int, width: int) -> None:
        """Set the written-byte mask of `r` where the store just wrote: `idx` indexes the
        store's span view of `nbytes`-byte elements every `width` bytes (`_lane_spans`), and
        the mask, at the same base, has the same view: one index per lane, not one per byte."""
        self.written_mask(r).spans(nbytes, width)[1][idx] = _ones(nbytes)


class MaskPool:
    """Written-byte masks of released tracked calls, reused by the next ones: a mask is as
    big as its region (a 4096x8192 bf16 output: 64 MiB), and memory a process touches for the
    first time costs page faults -- about 0.25 s for 64 MiB on the CI VMs, against ~5 ms to
    clear a used mask. At most `limit` bytes are kept, the oldest dropped first."""

    def __init__(self, limit: int = 256 << 20):
        self.limit = limit
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A cleared bool mask of `size` bytes."""
        with self._lock:
            for i in range(len(self._free) - 1, -1, -1):  # the latest first: likeliest still cached
                bits = self._free[i]
                if bits.size == size:
                    del self._free[i]
                    bits.fill(False)
                    return bits
        return np.zeros(size, dtype=bool)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()

    def give(self, bits: np.ndarray) -> None:
        with self._lock:
            self._free.append(bits)
            while sum(b.size for b in self._free) > self.limit:
                self._free.pop(0)


MASKS = MaskPool()
register_reset(MASKS.clear)  # ldssan.runtime.reset_caches() gives the pooled memory back


@register_cache
@functools.lru_cache(maxsize=None)
def _ones(nbytes: int) -> np.void:
    """`nbytes` bytes of 0x01 as one element: True in every byte of a bool view."""
    return np.void(b"\x01" * nbytes)


def _lane_spans(r: Region, off: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """(array of `nb`-byte elements over region `r`, one index per lane) addressing the `nb`
    bytes at each offset: elements start every 8, 4, 2 or 1 bytes, the widest every access is
    aligned to (a coarser stride indexes a shorter view, a little faster)."""
    low = int(np.bitwise_or.reduce(off)) | r.base | 8
    width = low & -low
    head, view = r.spans(nb, width)
    return view, (off - head) >> (width.bit_length() - 1)


class ProcessTensors:
    """CPU torch tensor storages known to be alive, to resolve raw addresses against.

    Every tensor an emulated launch registers is remembered by weak reference (a storage
    freed since is forgotten, never read). A miss falls back to one scan of the objects the
    garbage collector tracks, remembering every CPU tensor it meets, so a later miss in the
    same storage is cheap."""

    def __init__(self) -> None:
        # storage base -> (size, a tensor on it): ranges are matched first, and only a hit
        # is checked against the live tensor (freed, or storage reallocated -> forgotten)
        self._refs: dict[int, tuple[int, weakref.ref]] = {}

    def remember(self, tensor) -> None:
        span = _cpu_storage(tensor)
        if span is not None:
            self._refs[span[0]] = (span[1], weakref.ref(tensor))

    def storage_at(self, addr: int, nbytes: int) -> tuple[int, int, str] | None:
        """(base, size, description) of a live CPU storage holding the bytes, or None."""
        hit = self._lookup(addr, nbytes)
        if hit is None:
            self._scan()
            hit = self._lookup(addr, nbytes)
        return hit

    def _lookup(self, addr: int, nbytes: int):
        for base, (size, ref) in list(self._refs.items()):
            if not (base <= addr and addr + nbytes <= base + size):
                continue
            t = ref()
            if t is None or _cpu_storage(t) != (base, size):
                del self._refs[base]
                continue
            return base, size, f"the {size}-byte storage of a live {t.dtype} CPU tensor"
        return None

    def _scan(self) -> None:
        import torch

        self._refs = {b: e for b, e in self._refs.items() if e[1]() is not None}
        for obj in gc.get_objects():
            # type(), not isinstance(): isinstance reads `__class__`, which some module
            # proxies answer with a deprecation warning
            if issubclass(type(obj), torch.Tensor):
                self.remember(obj)


def _cpu_storage(tensor) -> tuple[int, int] | None:
    """(base, nbytes) of a CPU tensor's storage; None for other devices and storage-less
    tensors (sparse, nested, meta), which hold no host bytes the kernel could reach."""
    try:
        storage = tensor.untyped_storage()
        if storage.device.type != "cpu":
            return None
        base, size = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    return (base, size) if base and size > 0 else None


PROCESS_TENSORS = ProcessTensors()


_INDEX_SEEN_BYTES = 8 << 20  # index arrays remembered per LDS (`LocalMemory.index`)
_INDEX_SEEN_LANES = 1024  # ... for accesses of at most this many lanes (a batch of a few workgroups)
_INDEX_TRIAL = 256  # an LDS stops remembering at this many misses if it had fewer hits


class LocalMemory:
    """LDS of a batch of workgroups, with an out-of-range flag per access."""

    remember_index = True  # `index` results remembered (False: computed each time; tests compare)

    def __init__(self, lds_bytes: int, n_groups: int, fill: int | None = None):
        self.lds_bytes = lds_bytes
        self.n_groups = n_groups
        self.data = np.zeros(max(1, lds_bytes) * n_groups, dtype=np.uint8)
        self.oob_warned = False  # a plain run warns of its first out-of-range ds access only
        # dword view for aligned accesses (4x fewer indices); None when groups are not 4-aligned
        self.words = self.data.view(np.uint32) if lds_bytes % 4 == 0 and self.data.size % 4 == 0 else None
        if fill is not None:
            self.data[:] = fill
        self._span_views: dict[int, np.ndarray] = {}  # `_spans` by element size
        self._index_seen: dict[tuple, tuple] = {}  # `index` results by (group base, addresses, size)
        self._index_bytes = 0
        self._index_misses = self._index_hits = 0

    def flat_index(self, group_base: np.ndarray, addr: np.ndarray, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """Byte indices (n, nbytes) and an in-range mask (n,)."""
        addr = addr.astype(np.int64, copy=False)
        ok = (addr >= 0) & (addr + nbytes <= self.lds_bytes)
        safe = np.where(ok, addr, 0)
        idx = (group_base + safe)[:, None] + np.arange(nbytes, dtype=np.int64)
        return idx, ok

    def index(self, group_base: np.ndarray, addr: np.ndarray, nbytes: int):
        """(array, indices, in-range mask): when every address is 4-aligned and the size a
        multiple of 4 (the common case), `nbytes`-byte elements starting at each dword and
        one index (n,) per lane; else bytes and indices (n, nbytes). The indices are
        read-only; the mask is the caller's own."""
        addr = addr.astype(np.int64, copy=False)
        if not self.remember_index or addr.size > _INDEX_SEEN_LANES or self._index_seen is None:
            return self._index(group_base, addr, nbytes)
        # kernels reload the same address patterns (per stage and slot): remembered by content
        # for small lane arrays (a workgroup's; batches of many workgroups compute them
        # faster than they hash them); the entry holds group_base, so its id stays its own
        # while the entry lives
        key = (id(group_base), addr.tobytes(), nbytes)
        hit = self._index_seen.get(key)
        if hit is None:
            self._index_misses += 1
            if self._index_misses == _INDEX_TRIAL and self._index_hits < _INDEX_TRIAL:
                self._index_seen = None  # patterns rarely come back: not worth the look-ups
            arr, idx, ok = self._index(group_base, addr, nbytes)
            if self._index_seen is None:
                return arr, idx, ok
            self._index_bytes += idx.nbytes
            if self._index_bytes > _INDEX_SEEN_BYTES:
                self._index_seen.clear()
                self._index_bytes = idx.nbytes
            idx.flags.writeable = False
            hit = self._index_seen[key] = (arr, idx, ok, group_base)
        else:
            self._index_hits += 1
        return hit[0], hit[1], hit[2].copy()

    def _index(self, group_base: np.ndarray, addr: np.ndarray, nbytes: int):
        ok = (addr >= 0) & (addr + nbytes <= self.lds_bytes)
        if self.words is not None and nbytes % 4 == 0 and nbytes <= self.lds_bytes and not (addr & 3).any():
            safe = addr if ok.all() else np.where(ok, addr, 0)
            return self._spans(nbytes), (group_base + safe) >> 2, ok
        safe = np.where(ok, addr, 0)
        idx = (group_base + safe)[:, None] + np.arange(nbytes, dtype=np.int64)
        return self.data, idx, ok

    def _spans(self, nbytes: int) -> np.ndarray:
        """LDS as overlapping `nbytes`-byte elements, one every dword (`spans`): one index
        per lane instead of one per dword."""
        view = self._span_views.get(nbytes)
        if view is None:
            view = self._span_views[nbytes] = spans(self.data, nbytes, 4)
        return view

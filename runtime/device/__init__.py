"""The device runtime: the `__ldssan_*` hook ABI as IR linked into the instrumented kernel,
so the kernel checks itself (for a real gfx1250), and a harness that runs that IR on the
virtual gfx1250 to prove it against the Python engine. DESIGN.md is the design."""

from .emulated import DeviceRun, RecordBuffer, emulated, record_buffer
from .layout import ShadowLayout
from .link import DeviceLinkError, link
from .settle import settle

__all__ = ["DeviceLinkError", "DeviceRun", "RecordBuffer", "ShadowLayout", "emulated", "link",
           "record_buffer", "settle"]

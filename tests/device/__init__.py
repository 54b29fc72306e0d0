"""The device runtime on the virtual gfx1250 (`benchmarks/device_diff.py`'s comparison with
the Python engine, in CI sizes) and gfx1250 code objects with it linked in. The hardware
suite is tests/hardware/."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def device_diff_module():
    """`benchmarks/device_diff.py` as a module (imported once; its dataclasses look their
    module up by name, so it is registered in sys.modules)."""
    if "device_diff" not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "benchmarks" / "device_diff.py"
        spec = importlib.util.spec_from_file_location("device_diff", path)
        sys.modules["device_diff"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["device_diff"])
    return sys.modules["device_diff"]

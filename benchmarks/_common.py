"""Shared pieces of the benchmark scripts: where they ran, and FlyDSL's cache location."""

from __future__ import annotations

import os
import platform

import numpy as np


def machine() -> dict:
    return {"cpu": platform.processor() or platform.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "cores": os.cpu_count()}


def use_bench_cache() -> None:
    """Keep benchmark builds out of the user's FlyDSL cache."""
    os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", os.path.join(os.getcwd(), ".bench-cache"))

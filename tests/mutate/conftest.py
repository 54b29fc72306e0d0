"""Fixtures of the mutation tests: the small kernel of `kernel_source.py` in a fresh file."""

from __future__ import annotations

import pytest

from .kernel_source import RING_KERNEL


@pytest.fixture
def write_kernel(tmp_path):
    """write_kernel(source=RING_KERNEL, name="ring_kernel") -> path of a fresh kernel file."""

    def write(source: str = RING_KERNEL, name: str = "ring_kernel") -> str:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        return str(path)

    return write

"""Fixtures of the mutation tests: the small kernel of `kernel_source.py` in a fresh file, and
one tiny campaign over it (local engine) shared by the tests that compare against it."""

from __future__ import annotations

import json

import pytest

from ldssan.cli import main as ldssan_main

from .kernel_source import RING_KERNEL


@pytest.fixture
def write_kernel(tmp_path):
    """write_kernel(source=RING_KERNEL, name="ring_kernel") -> path of a fresh kernel file."""

    def write(source: str = RING_KERNEL, name: str = "ring_kernel") -> str:
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        return str(path)

    return write


TINY_ARGS = ["-k", "2", "--no-live", "--timeout", "60"]  # the settings every tiny campaign uses


@pytest.fixture(scope="session")
def tiny_campaign(tmp_path_factory):
    """`ldssan mutate ring_kernel.py -j 2 -k 2` once per session: (exit code, JSON, Markdown)."""
    d = tmp_path_factory.mktemp("tiny")
    path = d / "ring_kernel.py"
    path.write_text(RING_KERNEL)
    code = ldssan_main(["mutate", str(path), "-j", "2", *TINY_ARGS,
                        "--json", str(d / "out.json"), "--markdown", str(d / "out.md")])
    return code, json.loads((d / "out.json").read_text()), (d / "out.md").read_text()

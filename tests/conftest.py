"""Test-suite setup: FlyDSL's compile cache goes to a fresh directory for the run, so the
suite never reads (or pollutes) the user's ~/.flydsl cache."""

import os
import tempfile

os.environ.setdefault("FLYDSL_RUNTIME_CACHE_DIR", tempfile.mkdtemp(prefix="ldssan-test-flydsl-cache-"))

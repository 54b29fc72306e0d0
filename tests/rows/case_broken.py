"""A test module that does not import (not collected by the suite: no `test_` file prefix)."""

import tests.rows.no_such_module  # noqa: F401


def test_never_collected():
    pass

"""Frozen reference implementation of the shadow engine (differential tests)."""

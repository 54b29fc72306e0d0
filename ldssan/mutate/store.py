"""The campaign store: one JSON line per finished variant, appended as results arrive, so an
interrupted campaign keeps what it finished and `--resume` runs only the rest.

    {"store": "ldssan.mutate/1", "kind": "mutant", "digest": <sha256 of the kernel file>,
     "id": "delete-sync:41", "config": {"launches": 8, "policy": "round-robin"}, "record": {...}}

A line is keyed by (kernel file digest, mutant id; the clean baseline's id is `BASELINE`)
and by the settings that change a verdict (`launches`, `policy`): a line written under
other settings, or for another version of the file, is not reused. A later line for a key
wins. A torn last line (the process died mid-write) is dropped; any other malformed line is
a `StoreError` naming the file and line, never silently skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ldssan.passes.ir.errors import UsageError

FORMAT = "ldssan.mutate/1"
BASELINE = "<baseline>"
_KEYS = ("store", "kind", "digest", "id", "config", "record")


class StoreError(UsageError, ValueError):
    """A store file ldssan cannot read (not a campaign store, or a corrupt line)."""


@dataclass(frozen=True)
class Key:
    digest: str
    id: str
    launches: int
    policy: str
    cases: str = ""  # where the cases came from when not the kernel's own (--pytest tests)


def verdict_settings(config) -> dict:
    """The campaign settings a stored verdict depends on (with --pytest, the tests and their
    files' digests: another test is another output check)."""
    settings = {"launches": config.launches, "policy": config.policy}
    if getattr(config, "pytest", None):
        from .target import source_digest

        settings["cases"] = ";".join(f"{spec}@{source_digest(spec.partition('::')[0])[:16]}"
                                     for spec in config.pytest)
    return settings


class Store:
    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: dict[Key, dict] = {}
        self.torn = False  # the last line was torn (and has been cut)
        if os.path.exists(path):
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as f:
            raw = f.read()
        lines = raw.decode("utf-8", errors="replace").split("\n")
        last = len(lines) - 1  # text after the final newline: "" unless the last write was torn
        for n, text in enumerate(lines, 1):
            if not text.strip():
                continue
            try:
                entry = json.loads(text)
                if not isinstance(entry, dict) or entry.get("store") != FORMAT or any(k not in entry for k in _KEYS):
                    raise ValueError(f"not a {FORMAT} line")
                key = Key(entry["digest"], entry["id"], int(entry["config"]["launches"]), entry["config"]["policy"],
                          str(entry["config"].get("cases", "")))
            except (ValueError, KeyError, TypeError) as exc:
                if n - 1 == last:
                    self.torn = True
                    continue
                raise StoreError(f"{self.path}:{n}: not a campaign store line ({exc})") from None
            self.entries[key] = entry
        if self.torn:  # cut the torn tail, so the next append starts a clean line
            with open(self.path, "r+b") as f:
                f.truncate(raw.rfind(b"\n") + 1)
        elif raw and not raw.endswith(b"\n"):  # a whole last line without its newline
            with open(self.path, "ab") as f:
                f.write(b"\n")

    def get(self, digest: str, ident: str, settings: dict) -> dict | None:
        """The stored entry of a variant under these settings, or None."""
        return self.entries.get(self._key(digest, ident, settings))

    @staticmethod
    def _key(digest: str, ident: str, settings: dict) -> Key:
        return Key(digest, ident, settings["launches"], settings["policy"], settings.get("cases", ""))

    def put(self, kind: str, digest: str, ident: str, settings: dict, record: dict) -> None:
        """Append one line and flush it (a crash after this keeps the result)."""
        entry = {"store": FORMAT, "kind": kind, "digest": digest, "id": ident, "config": dict(settings),
                 "record": record}
        line = json.dumps(entry, separators=(",", ":"))
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries[self._key(digest, ident, settings)] = entry

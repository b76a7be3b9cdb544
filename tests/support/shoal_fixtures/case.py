"""A unittest base class that owns temp dirs and daemons and prints their logs when a test fails.

Every resource made through `FixtureTestCase` is released by `addCleanup` (per test) or
`addClassCleanup` (per class, for the `class_*` variants), which run even when a test fails or
errors. Cleanups run in reverse order, so a daemon started after its temp dir was made is
stopped before the dir is removed. When a test failed, the tails of every tracked log (the
test's and its class's) are printed to stderr before anything is stopped or removed; ctest
--output-on-failure shows them. SHOAL_KEEP_TMP=1 keeps temp dirs (their paths are printed).
"""

from __future__ import annotations

import os
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Callable, TypeVar

from .procs import rmtree_sealed, tail

T = TypeVar("T")
LogSource = tuple[str, Callable[[], str]]


def keep_tmp() -> bool:
    return os.environ.get("SHOAL_KEEP_TMP", "") not in ("", "0")


def _make_tmpdir(prefix: str) -> tuple[Path, Callable[[], None]]:
    path = Path(tempfile.mkdtemp(prefix=prefix))

    def remove() -> None:
        if keep_tmp():
            print(f"SHOAL_KEEP_TMP: kept {path}", file=sys.stderr)
        else:
            rmtree_sealed(path)
    return path, remove


def _log_sources(resource: object, logs: dict[str, Callable[[], str]] | None) -> list[LogSource]:
    out: list[LogSource] = []
    diag = getattr(resource, "diagnostics", None)
    if callable(diag):
        out.append((getattr(resource, "name", type(resource).__name__), diag))
    out.extend((logs or {}).items())
    return out


class FixtureTestCase(unittest.TestCase):
    """Base class for real-component tests. One test at a time per instance (unittest's way)."""

    _class_logs: list[LogSource] = []

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls._class_logs = []

    def setUp(self) -> None:
        super().setUp()
        self._logs: list[LogSource] = []
        self._dumped = False
        self._failures_before = self._failure_count()
        # Registered first, so it runs after the test's own cleanups: covers tests that only use
        # class-level resources. Tests with their own resources dump in their first cleanup.
        self.addCleanup(self._dump_logs_if_failed)

    # -- per-test resources ----------------------------------------------------------------------

    def tmpdir(self, prefix: str = "shoal-") -> Path:
        """A fresh directory under $TMPDIR, removed at test cleanup."""
        path, remove = _make_tmpdir(prefix)

        def cleanup() -> None:
            self._dump_logs_if_failed()
            remove()
        self.addCleanup(cleanup)
        return path

    def track(self, resource: T, stop: Callable[[], object] | None = None,
              logs: dict[str, Callable[[], str]] | None = None) -> T:
        """Stops `resource` (`stop()` or `resource.stop()`) at test cleanup and prints its
        `diagnostics()` plus `logs` (label → callable returning text) if the test fails."""
        stopper = stop if stop is not None else getattr(resource, "stop")
        self._logs.extend(_log_sources(resource, logs))

        def cleanup() -> None:
            self._dump_logs_if_failed()
            stopper()
        self.addCleanup(cleanup)
        return resource

    def add_log(self, label: str, path: str | os.PathLike) -> None:
        """Prints the tail of `path` if the test fails."""
        self._logs.append((label, lambda: tail(path, 40)))

    # -- per-class resources ---------------------------------------------------------------------

    @classmethod
    def class_tmpdir(cls, prefix: str = "shoal-") -> Path:
        """Like `tmpdir()`, removed after the last test of the class."""
        path, remove = _make_tmpdir(prefix)
        cls.addClassCleanup(remove)
        return path

    @classmethod
    def class_track(cls, resource: T, stop: Callable[[], object] | None = None,
                    logs: dict[str, Callable[[], str]] | None = None) -> T:
        """Like `track()`, stopped after the last test of the class; its logs are printed when
        any test of the class fails."""
        stopper = stop if stop is not None else getattr(resource, "stop")
        cls._class_logs.extend(_log_sources(resource, logs))
        cls.addClassCleanup(stopper)
        return resource

    # -- failure reporting -----------------------------------------------------------------------

    def _failure_count(self) -> int | None:
        # unittest (3.11+) reports a failure to the TestResult as soon as the test method ends,
        # before cleanups run; the running result is reachable through the private `_outcome`.
        # (`_outcome.success` cannot be used: it is reset for each cleanup.)
        result = getattr(getattr(self, "_outcome", None), "result", None)
        if result is None:
            return None
        return len(result.failures) + len(result.errors) + \
            len(getattr(result, "unexpectedSuccesses", ()))

    def _failed(self) -> bool:
        now = self._failure_count()
        if now is None or self._failures_before is None:
            return True  # Unknown: printing logs needlessly beats losing them.
        return now > self._failures_before

    def _dump_logs_if_failed(self) -> None:
        if self._dumped or not self._failed():
            return
        self._dumped = True
        out = [f"===== {self.id()} failed: component logs ====="]
        for label, fn in [*self._logs, *type(self)._class_logs]:
            try:
                text = fn()
            except Exception as e:  # noqa: BLE001
                text = f"(cannot collect: {e!r})"
            out.append(f"----- {label} -----\n{text}")
        print("\n".join(out), file=sys.stderr)

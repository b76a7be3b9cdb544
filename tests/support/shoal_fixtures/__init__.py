"""Fixtures for Shoal's real-component tests (Python 3.11 standard library only).

Each module starts and stops one kind of real component on this machine: an OCI image generator
(`oci`), Debian's `docker-registry` (`registry`) with an optional token issuer (`token_issuer`), a
private containerd (`containerd`), network namespaces joined by a shaped bridge (`netns`), Redis
with Sentinels and ACLs (`redis`), the process plumbing they share (`procs`) and a unittest base
class that owns it all (`case`).
Tests import them after adding `tests/support` to `sys.path` (ctest sets PYTHONPATH). See
docs/testing.md for the API and what was verified on this machine.
"""

from .case import FixtureTestCase  # noqa: F401
from .procs import Daemon, FixtureError, free_port, run, wait_until  # noqa: F401

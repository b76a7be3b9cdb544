"""Process plumbing shared by every fixture: daemons with their own log, bounded waits, free ports.

A `Daemon` is one child process started in its own session (so a stop reaches its whole process
group) with the kernel's parent-death signal set, so that a test runner killed by ctest's timeout
does not leave daemons behind. Every wait is bounded and fails with a `FixtureError` that names
what did not come up and carries the tail of its log. Daemons still alive at interpreter exit are
stopped by an atexit hook, in reverse start order.

Threading: a `Daemon` is meant to be driven from one thread (the test's). Start daemons from the
main thread: PR_SET_PDEATHSIG fires when the *thread* that forked the child exits.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

_PR_SET_PDEATHSIG = 1


class FixtureError(RuntimeError):
    """A fixture could not do what it was asked (a daemon did not start, a command failed)."""


# Every port free_port() or free_port_in_netns() has handed out in this process. The kernel's
# bind-to-0 draws from about 14,000 ports (one parity of the ephemeral range), so two draws for
# the same fixture (a peerd's HTTP and swarm ports) met often enough to fail a CI run: peerd's
# swarm took the port first and its HTTP listener then failed with "address already in use".
_ISSUED: set[int] = set()


def _fresh(draw: Callable[[], int], what: str) -> int:
    for _ in range(64):
        port = draw()
        if port not in _ISSUED:
            _ISSUED.add(port)
            return port
    raise FixtureError(f"no free port {what} that this process has not handed out already "
                       f"({len(_ISSUED)} handed out)")


def free_port(host: str = "127.0.0.1") -> int:
    """Returns a TCP port that was free on `host` a moment ago (bind to 0, read, close), and that
    no earlier call in this process returned.

    There is a small window in which another process can take the port; fixtures that start a
    daemon on it retry on "address already in use".
    """
    def draw() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    return _fresh(draw, f"on {host}")


def start_on_free_ports(daemon: "Daemon", wait: Callable[[], object], repick: Callable[[], bool],
                        first: bool, attempts: int = 3) -> None:
    """Starts `daemon` and runs `wait` (its readiness probe). On a first start whose daemon died
    with "address already in use" (another process took a port free_port() handed out, in the
    moment before the daemon bound it), `repick()` draws new ports and rewrites the config, and the
    start is tried again, `attempts` times in all. `repick` returns False when the ports were the
    caller's, which are not changed. A restart (`first` False) keeps its ports: clients hold them."""
    for attempt in range(attempts):
        daemon.start()
        try:
            wait()
            return
        except FixtureError:
            taken = "address already in use" in tail(daemon.log_path, 5).lower()
            if not first or not taken or attempt == attempts - 1:
                raise
            daemon.stop()
            if not repick():
                raise


def tail(path: str | os.PathLike | None, lines: int = 40) -> str:
    """The last `lines` lines of a text file, or a note saying why there are none."""
    if path is None:
        return "(no log file)"
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(cannot read {path}: {e.strerror})"
    return "\n".join(data.splitlines()[-lines:]) or "(log is empty)"


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               interval: float = 0.05,
               diagnostics: Callable[[], str] | None = None) -> object:
    """Polls `predicate` until it returns a truthy value, which is returned.

    Raises FixtureError naming `what` after `timeout` seconds; `diagnostics()` (for example a log
    tail) is appended to the message. Exceptions from the predicate count as "not yet", except a
    daemon's death reported by `Daemon`'s probes, which fails the wait at once.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except _DaemonDied:
            raise
        except Exception as e:  # noqa: BLE001 - "not yet" until the deadline
            last_exc = e
        if time.monotonic() >= deadline:
            msg = f"{what}: not reached within {timeout:.1f}s"
            if last_exc is not None:
                msg += f" (last error: {last_exc!r})"
            if diagnostics is not None:
                msg += "\n" + diagnostics()
            raise FixtureError(msg)
        time.sleep(interval)


def netns_argv(netns: str | None, argv: Sequence[str]) -> list[str]:
    """`argv` prefixed with `ip netns exec <netns>` when a namespace is given."""
    argv = [str(a) for a in argv]
    return ["ip", "netns", "exec", netns, *argv] if netns else argv


def run(argv: Sequence[str], *, timeout: float = 60, what: str | None = None,
        netns: str | None = None, check: bool = True, env: Mapping[str, str] | None = None,
        input: bytes | None = None, cwd: str | os.PathLike | None = None
        ) -> subprocess.CompletedProcess:
    """Runs a command to completion with a time bound and captured output.

    With `check`, a non-zero exit or a timeout raises FixtureError with the command, its exit
    status and the tail of its stderr/stdout. Output is returned as text.
    """
    full = netns_argv(netns, argv)
    label = what or " ".join(full)
    try:
        cp = subprocess.run(full, capture_output=True, timeout=timeout, env=_env(env),
                            input=input, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise FixtureError(f"{label}: timed out after {timeout}s\n{_decode(e.stderr)[-2000:]}")
    except FileNotFoundError as e:
        raise FixtureError(f"{label}: {e}") from None
    out = subprocess.CompletedProcess(full, cp.returncode, _decode(cp.stdout), _decode(cp.stderr))
    if check and cp.returncode != 0:
        raise FixtureError(f"{label}: exit status {cp.returncode}\n"
                           f"stderr: {out.stderr[-3000:]}\nstdout: {out.stdout[-1000:]}")
    return out


def _decode(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def _env(extra: Mapping[str, str] | None) -> dict[str, str] | None:
    if extra is None:
        return None
    env = dict(os.environ)
    env.update(extra)
    return env


def _load_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved once in the parent: between fork and exec (where other threads' locks may be held)
# the child then only calls a function pointer.
_prctl = _load_prctl()


def _child_setup() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGKILL the child when the test
    # process dies, so a runner killed by a timeout leaves no daemons. Best effort.
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


_live: list["Daemon"] = []
_live_lock = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        daemons = list(reversed(_live))
    for d in daemons:
        try:
            d.stop(timeout=5)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


class Daemon:
    """One long-running child process with its own log file.

    Lifecycle: construct, `start()`, optionally `wait_tcp()`/`wait_http()`, then `stop()` (SIGTERM,
    then SIGKILL after a grace period) or `kill()` (SIGKILL now, for crash tests). stdout and
    stderr go to `log_path`, unless `stdout_path` is given, in which case stdout goes there
    (docker-registry writes its access log to stdout). With `netns`, the process runs inside that
    network namespace through `ip netns exec` (which execs, so the pid is the daemon's).
    Usable as a context manager; also stopped at interpreter exit if still running.
    """

    def __init__(self, name: str, argv: Sequence[str | os.PathLike], *,
                 log_path: str | os.PathLike, stdout_path: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None,
                 netns: str | None = None) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.stdout_path = Path(stdout_path) if stdout_path is not None else None
        self.env = env
        self.cwd = cwd
        self.netns = netns
        self.proc: subprocess.Popen | None = None
        self._group_killed = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "Daemon":
        if self.proc is not None and self.proc.poll() is None:
            raise FixtureError(f"{self.name}: already running (pid {self.proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        out = open(self.stdout_path, "ab") if self.stdout_path is not None else log
        try:
            self.proc = subprocess.Popen(
                netns_argv(self.netns, self.argv), stdin=subprocess.DEVNULL, stdout=out,
                stderr=log, env=_env(self.env), cwd=self.cwd, start_new_session=True,
                preexec_fn=_child_setup)
        except OSError as e:
            raise FixtureError(f"{self.name}: cannot start {self.argv[0]}: {e}") from None
        finally:
            log.close()
            if out is not log:
                out.close()
        self._group_killed = False
        with _live_lock:
            _live.append(self)
        return self

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM to the process group, SIGKILL after `timeout` s. Returns the exit status.

        The leader is reaped only after a final SIGKILL to its group (which catches children
        that ignored SIGTERM): until it is reaped its pid cannot be reused, so the group signal
        cannot reach an unrelated process.
        """
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self._signal_group(signal.SIGTERM)
            if not self._exited_unreaped(timeout):
                self._signal_group(signal.SIGKILL)
                if not self._exited_unreaped(10):
                    raise FixtureError(f"{self.name}: pid {self.proc.pid} survived SIGKILL")
            self._signal_group(signal.SIGKILL)
            self.proc.wait(timeout=10)
        elif not self._group_killed:
            # The leader was reaped already (by poll()); children left in its group keep the
            # group id reserved, so this reaches only them (or nothing).
            self._signal_group(signal.SIGKILL)
        self._group_killed = True
        self._forget()
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL to the process group now (simulates a crash). Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            self._signal_group(signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                raise FixtureError(f"{self.name}: pid {self.proc.pid} survived SIGKILL for 10s")
            self._group_killed = True
        self._forget()
        return self.proc.returncode

    def send_signal(self, sig: int) -> None:
        """Sends `sig` to the daemon's pid only (e.g. SIGSTOP/SIGCONT to simulate a hang)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def __enter__(self) -> "Daemon":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state -----------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def diagnostics(self, lines: int = 40) -> str:
        """Exit status plus log tails, for error messages."""
        state = "running" if self.alive else f"exited with status {self.returncode}"
        text = f"--- {self.name} (pid {self.pid}, {state}) log {self.log_path}:\n"
        text += self.log_tail(lines)
        if self.stdout_path is not None:
            text += f"\n--- {self.name} stdout {self.stdout_path}:\n{tail(self.stdout_path, lines)}"
        return text

    # -- readiness -------------------------------------------------------------------------------

    def wait_tcp(self, port: int, host: str = "127.0.0.1", timeout: float = 20) -> None:
        """Waits until `host:port` accepts a TCP connection (from inside the daemon's netns)."""
        def up() -> bool:
            self.check_alive(f"listening on {host}:{port}")
            if self.netns:
                return _tcp_open_in_netns(self.netns, host, port)
            with socket.create_connection((host, port), timeout=1):
                return True
        wait_until(up, timeout, f"{self.name} listening on {host}:{port}",
                   interval=0.05, diagnostics=self.diagnostics)

    def wait_http(self, url: str, timeout: float = 20,
                  ok: Callable[[int], bool] = lambda status: status < 500, client: Any = None) -> int:
        """Waits until `url` answers with a status accepted by `ok`; returns that status.
        `client`: the certs.TLSParty presented to an https URL."""
        def up() -> int:
            self.check_alive(f"serving {url}")
            status = http_status(url, netns=self.netns, client=client)
            return status if ok(status) else 0
        return int(wait_until(up, timeout, f"{self.name} serving {url}", interval=0.1,
                              diagnostics=self.diagnostics))

    def wait_log(self, needle: str, timeout: float = 20, *, stdout: bool = False) -> None:
        """Waits until `needle` appears in the daemon's log (or stdout log)."""
        path = self.stdout_path if stdout and self.stdout_path else self.log_path

        def found() -> bool:
            self.check_alive(f"logging {needle!r}")
            try:
                return needle in path.read_text("utf-8", "replace")
            except OSError:
                return False
        wait_until(found, timeout, f"{self.name} logging {needle!r}",
                   diagnostics=self.diagnostics)

    # -- internals -------------------------------------------------------------------------------

    def check_alive(self, doing: str) -> None:
        """Raises (failing any wait_until at once) if the daemon is not running."""
        if self.proc is None:
            raise FixtureError(f"{self.name}: not started")
        if self.proc.poll() is not None:
            # Not retried by wait_until's caller: a dead daemon will not come up.
            raise _DaemonDied(f"{self.name} exited with status {self.proc.returncode} before "
                              f"{doing}\n{self.diagnostics()}")

    def _exited_unreaped(self, timeout: float) -> bool:
        """Waits up to `timeout` s for the leader to exit, leaving it a zombie (not reaped)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = os.waitid(os.P_PID, self.proc.pid,
                                 os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True  # Already reaped elsewhere.
            if info is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def _signal_group(self, sig: int) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _forget(self) -> None:
        with _live_lock:
            if self in _live:
                _live.remove(self)


class _DaemonDied(FixtureError):
    """Raised by a readiness probe when the daemon has exited: wait_until fails at once."""


def http_status(url: str, *, netns: str | None = None, timeout: float = 2,
                method: str = "GET", headers: Mapping[str, str] | None = None,
                client: Any = None) -> int:
    """The HTTP status of one request to `url` (4xx/5xx included), from `netns` when given.
    `client` (a certs.TLSParty): the CA and client certificate for an https URL."""
    if netns:
        argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method,
                "--max-time", str(timeout), *(client.curl_args() if client else [])]
        for k, v in (headers or {}).items():
            argv += ["-H", f"{k}: {v}"]
        cp = run([*argv, url], netns=netns, timeout=timeout + 5, check=False)
        code = int(cp.stdout.strip() or 0)
        if code == 0:
            raise FixtureError(f"curl {url} in {netns}: no answer ({cp.stderr.strip()})")
        return code
    req = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout,
                                    context=client.ssl_context() if client else None) as r:
            return r.status
    except urllib.error.HTTPError as e:
        e.close()
        return e.code


def _tcp_open_in_netns(netns: str, host: str, port: int) -> bool:
    code = ("import socket,sys\n"
            f"s=socket.create_connection(({host!r},{port}),timeout=1)\n")
    cp = run([sys.executable, "-c", code], netns=netns, timeout=10, check=False)
    return cp.returncode == 0


def free_port_in_netns(netns: str, host: str) -> int:
    """Like free_port(), for an address inside a network namespace."""
    code = ("import socket\ns=socket.socket()\n"
            f"s.bind(({host!r},0))\nprint(s.getsockname()[1])\n")
    return _fresh(lambda: int(run([sys.executable, "-c", code], netns=netns, timeout=10,
                                  what=f"free port in {netns}").stdout), f"on {host} in {netns}")



_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


def is_sealed(path: "str | os.PathLike[str]") -> bool:
    """Whether a file carries the immutable flag (FS_IMMUTABLE_FL)."""
    import array
    import fcntl
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        return bool(flags[0] & _FS_IMMUTABLE_FL)
    except OSError:
        return False
    finally:
        os.close(fd)


def rmtree_sealed(path: "str | os.PathLike[str]") -> None:
    """shutil.rmtree that first lifts the immutable flag peerd puts on dataset view files (sealed
    hard links to cache objects, docs/cache.md "Sealed views"), which refuse their unlink."""
    import array
    import fcntl
    import shutil
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                flags = array.array("i", [0])
                fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
                if flags[0] & _FS_IMMUTABLE_FL:
                    flags[0] &= ~_FS_IMMUTABLE_FL
                    fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags)
            except OSError:
                pass
            finally:
                os.close(fd)
    shutil.rmtree(path, ignore_errors=True)

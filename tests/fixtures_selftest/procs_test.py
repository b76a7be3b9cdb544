"""Self-test of shoal_fixtures.procs: bounded waits with useful errors, and nothing left behind."""

import os
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import Daemon, FixtureError, FixtureTestCase, free_port  # noqa: E402
from shoal_fixtures.procs import wait_until  # noqa: E402


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class ProcsTest(FixtureTestCase):
    def test_wait_tcp_and_http_on_a_real_server(self):
        d = self.tmpdir()
        port = free_port()
        srv = self.track(Daemon("http.server", [sys.executable, "-m", "http.server", str(port),
                                                "--bind", "127.0.0.1", "--directory", d],
                                log_path=d / "srv.log").start())
        srv.wait_tcp(port, timeout=20)
        self.assertEqual(srv.wait_http(f"http://127.0.0.1:{port}/", timeout=10), 200)
        self.assertTrue(srv.alive)
        self.assertIsNotNone(srv.stop())
        self.assertFalse(srv.alive)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

    def test_timeout_names_the_daemon_and_shows_its_log(self):
        d = self.tmpdir()
        sleeper = self.track(Daemon("sleeper", ["sh", "-c", "echo booting-marker; exec sleep 60"],
                                    log_path=d / "s.log").start())
        sleeper.wait_log("booting-marker", timeout=10)
        t0 = time.monotonic()
        with self.assertRaises(FixtureError) as cm:
            sleeper.wait_tcp(free_port(), timeout=1)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn("sleeper listening on", str(cm.exception))
        self.assertIn("booting-marker", str(cm.exception))

    def test_early_exit_fails_fast_with_status(self):
        d = self.tmpdir()
        crash = self.track(Daemon("crasher", ["sh", "-c", "echo fatal-config-error >&2; exit 3"],
                                  log_path=d / "c.log").start())
        t0 = time.monotonic()
        with self.assertRaises(FixtureError) as cm:
            crash.wait_tcp(free_port(), timeout=30)
        self.assertLess(time.monotonic() - t0, 10, "a dead daemon must not wait for the timeout")
        self.assertIn("exited with status 3", str(cm.exception))
        self.assertIn("fatal-config-error", str(cm.exception))

    def test_stop_escalates_to_sigkill_and_reaps_the_group(self):
        d = self.tmpdir()
        # The shell ignores SIGTERM and has a child: stop() must kill both.
        stubborn = self.track(Daemon("stubborn", ["sh", "-c",
                                                  "trap '' TERM; sleep 300 & echo $! > child; "
                                                  "wait; wait"],
                                     log_path=d / "x.log", cwd=d).start())
        wait_until(lambda: (d / "child").exists() and (d / "child").read_text().strip(), 10,
                   "child pid file")
        child = int((d / "child").read_text())
        t0 = time.monotonic()
        status = stubborn.stop(timeout=1)
        self.assertEqual(status, -signal.SIGKILL)
        self.assertLess(time.monotonic() - t0, 8)
        wait_until(lambda: not pid_alive(child), 5, "child of stopped daemon gone")

    def test_kill_is_immediate(self):
        d = self.tmpdir()
        p = self.track(Daemon("victim", ["sleep", "300"], log_path=d / "v.log").start())
        self.assertEqual(p.kill(), -signal.SIGKILL)

    def test_daemons_die_with_a_killed_test_process(self):
        # A runner killed by ctest's timeout (SIGKILL: no atexit) must not leave daemons.
        d = self.tmpdir()
        support = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support")
        script = (f"import sys,time; sys.path.insert(0,{support!r})\n"
                  "from shoal_fixtures import Daemon\n"
                  f"x=Daemon('orphan',['sleep','300'],log_path={str(d / 'o.log')!r}).start()\n"
                  f"open({str(d / 'pid')!r},'w').write(str(x.pid))\n"
                  "time.sleep(300)\n")
        runner = subprocess.Popen([sys.executable, "-c", script])
        self.addCleanup(lambda: (runner.kill(), runner.wait()))
        wait_until(lambda: (d / "pid").exists() and (d / "pid").read_text(), 20, "orphan pid")
        orphan = int((d / "pid").read_text())
        self.assertTrue(pid_alive(orphan))
        runner.kill()
        runner.wait()
        wait_until(lambda: not pid_alive(orphan), 10, "daemon killed by PDEATHSIG")

    def test_free_port_is_bindable(self):
        port = free_port()
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


if __name__ == "__main__":
    unittest.main(verbosity=2)

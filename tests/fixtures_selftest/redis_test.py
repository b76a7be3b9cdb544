"""Self-test of shoal_fixtures.redis: a Redis primary, a replica and 3 Sentinels on loopback.

Proves what the HA scheduler relies on: a write acknowledged by `WAIT 1` is on the replica; the
ACLs refuse the unauthenticated default user, a wrong password, and the scheduler user's reach
outside `shoal:*` or into admin commands (also inside a script); SIGKILL of the primary makes the
Sentinels promote the replica within seconds with the acknowledged key on it; the old primary,
restarted, rejoins as a replica (Sentinel converts it, or `restart(replica_of=...)` starts it as
one); `stop_all()`/`start_again()` bring everything back (empty: persistence is off).
"""

import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from shoal_fixtures import FixtureTestCase  # noqa: E402
from shoal_fixtures.redis import ADMIN, REPL, SCHEDULER, SENTINEL, RedisError, RedisHA  # noqa: E402

FAILOVER_BOUND = 20  # s; down-after 2 s, measured ~3.3 s; a split vote retries after 10 s


def redis_pids():
    """Running redis-server/redis-sentinel processes (other runs' included: compare to ours)."""
    cp = subprocess.run(["pgrep", "-x", "redis-server|redis-sentinel"], capture_output=True,
                        text=True)
    return {int(p) for p in cp.stdout.split()}


class RedisAclTest(FixtureTestCase):
    """Replication and ACLs on one cluster, shared by the tests of this class (none changes its
    topology)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.redis = cls.class_track(RedisHA(cls.class_tmpdir("shoal-redis-")).start())

    def test_1_acknowledged_write_is_on_the_replica(self):
        r = self.redis
        primary = r.primary_addr()
        self.assertEqual(primary, r.data_addrs()[0])
        self.assertEqual(r.role(primary)[0], "master")
        replies = r.cli_session([["SET", "shoal:ack", "v1"], ["WAIT", 1, 1000]], user=SCHEDULER)
        self.assertEqual(replies, ["OK", "1"])
        replica = r.data_addrs()[1]
        self.assertEqual(r.role(replica)[:3], ["slave", primary.host, str(primary.port)])
        self.assertEqual(r.cli("GET", "shoal:ack", addr=replica, user=SCHEDULER), "v1")
        # Every Sentinel names the same primary, for the scheduler user too.
        for s in r.sentinel_addrs():
            self.assertEqual(r.cli("SENTINEL", "get-master-addr-by-name", "shoal", addr=s,
                                   user=SCHEDULER).split(), [primary.host, str(primary.port)])

    def test_2_acl_refusals(self):
        r = self.redis
        noauth = r.cli("PING", user=None, check=False)
        self.assertIn("NOAUTH", noauth)
        for s in r.sentinel_addrs()[:1]:
            self.assertIn("NOAUTH", r.cli("SENTINEL", "masters", addr=s, user=None, check=False))
        self.assertIn("WRONGPASS", r.cli("PING", user=SCHEDULER, password="wrong", check=False))
        self.assertIn("WRONGPASS", r.cli("PING", addr=r.sentinel_addrs()[0], user=SCHEDULER,
                                         password="wrong", check=False))
        refused = [
            ("CONFIG", "SET", "maxmemory", "1"), ("CONFIG", "GET", "*"), ("FLUSHALL",),
            ("FLUSHDB",), ("KEYS", "*"), ("DEBUG", "SLEEP", "0"), ("SHUTDOWN", "NOSAVE"),
            ("ACL", "LIST"), ("REPLICAOF", "NO", "ONE"), ("CLIENT", "KILL", "TYPE", "normal"),
            ("SELECT", "1"), ("SET", "other:key", "x"), ("GET", "other:key"),
            ("PUBLISH", "other:chan", "x"), ("FUNCTION", "FLUSH"),
            ("EVAL", "return redis.call('SET', 'other:key', 'x')", "0"),
            ("EVAL", "return redis.call('FLUSHALL')", "0"),
        ]
        for cmd in refused:
            with self.subTest(cmd=cmd):
                err = r.cli(*cmd, user=SCHEDULER, check=False)
                # Inside a script the ACL refusal is an ERR naming the script.
                self.assertTrue(err.startswith("NOPERM") or
                                err.startswith("ERR The user executing the script can't"), err)
        self.assertEqual(r.cli("GET", "shoal:ack", user=SCHEDULER), "v1",
                         "a refused command changed the data")
        # What the scheduler needs works.
        allowed = r.cli_session([
            ["MULTI"], ["INCR", "shoal:ctr"], ["XADD", "shoal:log", "*", "k", "v"], ["EXEC"],
            ["EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "shoal:lua", "x"],
            ["XREAD", "COUNT", "10", "STREAMS", "shoal:log", "0"],
            ["XTRIM", "shoal:log", "MAXLEN", "0"], ["PUBLISH", "shoal:events", "hi"],
            ["WAIT", "1", "1000"], ["ROLE"], ["PING"]], user=SCHEDULER)
        self.assertEqual(allowed[0:3], ["OK", "QUEUED", "QUEUED"], allowed)
        self.assertEqual(allowed[3].splitlines()[0], "1", allowed)     # EXEC: INCR's reply
        self.assertEqual(allowed[4], "OK", allowed)                     # EVAL
        self.assertEqual(allowed[5].splitlines()[:1], ["shoal:log"], allowed)  # XREAD
        self.assertEqual(allowed[6:9], ["1", "0", "1"], allowed)        # XTRIM PUBLISH WAIT
        self.assertTrue(allowed[9].startswith("master") and allowed[10] == "PONG", allowed)
        self.assertIn("role:master", r.cli("INFO", "replication", user=SCHEDULER))
        # Sentinel: discovery yes, steering no.
        s = r.sentinel_addrs()[0]
        for cmd in [("SENTINEL", "FAILOVER", "shoal"), ("SENTINEL", "REMOVE", "shoal"),
                    ("SENTINEL", "SET", "shoal", "quorum", "1"), ("SENTINEL", "RESET", "*")]:
            with self.subTest(sentinel_cmd=cmd):
                self.assertIn("NOPERM", r.cli(*cmd, addr=s, user=SCHEDULER, check=False))
        # The service users can do their job only.
        for user in (REPL, SENTINEL):
            with self.subTest(user=user):
                self.assertIn("NOPERM", r.cli("GET", "shoal:ack", user=user, check=False))
                self.assertIn("NOPERM", r.cli("SET", "shoal:ack", "x", user=user, check=False))
        self.assertEqual(r.cli("PING", user=REPL), "PONG")
        with self.assertRaises(RedisError):
            r.cli("FLUSHALL", user=SCHEDULER)


class RedisFailoverTest(FixtureTestCase):
    def test_3_kill_primary_promotes_replica_and_old_primary_rejoins(self):
        r = self.track(RedisHA(self.tmpdir("shoal-redis-")).start())
        self.assertEqual(r.cli_session([["SET", "shoal:ack", "v1"], ["WAIT", 1, 1000]],
                                       user=SCHEDULER), ["OK", "1"])
        old = r.kill_primary()
        t0 = time.monotonic()
        new = r.wait_failover(old, timeout=FAILOVER_BOUND, all_sentinels=False)
        took = time.monotonic() - t0
        self.assertEqual(r.wait_failover(old, timeout=10), new)
        print(f"\nfailover {old} -> {new}: promoted after {took:.2f} s, every Sentinel agrees "
              f"after {time.monotonic() - t0:.2f} s", file=sys.stderr)
        self.assertNotEqual(new, old)
        self.assertEqual(new, r.data_addrs()[1])
        self.assertEqual(r.role(new)[0], "master")
        self.assertEqual(r.cli("GET", "shoal:ack", addr=new, user=SCHEDULER), "v1")
        self.assertEqual(r.cli("SET", "shoal:after", "v2", addr=new, user=SCHEDULER), "OK")
        self.assertEqual(r.primary_addr(), new)

        # The old primary, restarted with its own config, is an empty primary until Sentinel
        # converts it (after ~10 s: 8 s of stable role, INFO every 10 s).
        t0 = time.monotonic()
        r.restart(old)
        r.wait_replica(old, new, timeout=40)
        print(f"old primary rejoined as a replica after {time.monotonic() - t0:.2f} s",
              file=sys.stderr)
        self.assertEqual(r.cli_session([["SET", "shoal:third", "v3"], ["WAIT", 1, 1000]],
                                       addr=new, user=SCHEDULER), ["OK", "1"])
        self.assertEqual(r.cli("GET", "shoal:after", addr=old, user=SCHEDULER), "v2")

        # Second round, back to the first node; this time the fixture restarts the killed
        # primary as a replica, as an orchestrator would.
        r.kill(new)
        self.assertEqual(r.wait_failover(new, timeout=FAILOVER_BOUND), old)
        t0 = time.monotonic()
        r.restart(new, replica_of=old)
        print(f"restart(replica_of=...) linked after {time.monotonic() - t0:.2f} s",
              file=sys.stderr)
        self.assertEqual(r.cli("GET", "shoal:third", addr=new, user=SCHEDULER), "v3")

        # Redis entirely down, then back: same addresses, same primary, no data (no persistence).
        r.stop_all(kill=True)
        self.assertIn("Could not connect", r.cli("PING", addr=old, check=False))
        t0 = time.monotonic()
        self.assertEqual(r.start_again(), old)
        print(f"start_again ready after {time.monotonic() - t0:.2f} s", file=sys.stderr)
        self.assertEqual(r.primary_addr(), old)
        self.assertEqual(r.cli("GET", "shoal:ack", user=SCHEDULER), "")
        self.assertEqual(r.cli_session([["SET", "shoal:back", "1"], ["WAIT", 1, 1000]],
                                       user=SCHEDULER), ["OK", "1"])

        r.stop()
        self.assertEqual(len(r.started_pids), 12)  # 5 at start, 2 restarts, 5 by start_again
        self.assertEqual(redis_pids() & set(r.started_pids), set(), "redis processes left behind")


class RedisSingleTest(FixtureTestCase):
    def test_single_has_the_same_users(self):
        r = self.track(RedisHA.single(self.tmpdir("shoal-redis-")).start())
        self.assertEqual(r.sentinel_addrs(), [])
        self.assertEqual(r.primary_addr(), r.data_addrs()[0])
        self.assertEqual(r.cli("SET", "shoal:x", "1", user=SCHEDULER), "OK")
        self.assertIn("NOPERM", r.cli("SET", "x", "1", user=SCHEDULER, check=False))
        self.assertIn("NOAUTH", r.cli("GET", "shoal:x", user=None, check=False))
        self.assertEqual(r.cli("DBSIZE", user=ADMIN), "1")


if __name__ == "__main__":
    unittest.main()

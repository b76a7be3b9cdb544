"""Redis for the HA scheduler: a primary, N replicas and 3 Sentinels, with ACLs, on free ports.

Layout (all under the fixture's directory, one subdirectory per daemon):

    primary/redis.conf, primary/redis.log        redis-server, the primary at start
    replica-<i>/redis.conf, replica-<i>/redis.log  redis-server with `replicaof` the primary
    sentinel-<i>/sentinel.conf, sentinel-<i>/sentinel.log   redis-sentinel monitoring `shoal`

Every daemon is a `procs.Daemon` bound to one address (default 127.0.0.1), optionally inside a
network namespace (`netns`: all daemons in that one namespace, and `cli()` runs there too). Both
kinds of config file stay writable: Sentinel rewrites its own on every state change, and sends
CONFIG REWRITE to the data nodes it reconfigures, so a node restarted after a failover comes back
with the role Sentinel last gave it (as with a real deployment). Persistence is off by default
(`save ""`, `appendonly no`): a data node restarted after `stop_all()` comes back empty, which is
what "Redis lost everything" looks like to the scheduler; `appendonly=True` keeps an AOF.
Replication is diskless both ways (`repl-diskless-sync` with delay 0, so a replica syncs at once
where 7.0 waits 5 s for more replicas; `repl-diskless-load swapdb`), and `rdb-del-sync-files
yes`: otherwise a replica keeps the RDB of its last full sync and loads it, stale, on restart.
`enable-debug-command local`: tests may DEBUG SLEEP a node as the admin user (a hung primary).

ACLs. Redis is inside the trust boundary: only the scheduler writes to it, nodes never talk to it.
The `default` user is off on every server, so an unauthenticated client can run nothing but AUTH
and HELLO. One password per user name (random per fixture), the same on data nodes and Sentinels:

  shoal-scheduler  (data)  the scheduler replicas; `SCHEDULER_RULES`: keys `shoal:*` and pub/sub
                   channels `shoal:*` only; the data categories (@read @write @stream), MULTI/EXEC
                   (@transaction), EVAL/EVALSHA/SCRIPT LOAD|EXISTS (@scripting), PUBLISH/SUBSCRIBE
                   (@pubsub), PING/HELLO/CLIENT SETNAME/WAIT (@connection); then minus @admin and
                   @dangerous (CONFIG, DEBUG, SHUTDOWN, FLUSHALL/FLUSHDB, KEYS, ACL, MONITOR,
                   REPLICAOF, CLIENT KILL|LIST|PAUSE, SORT, RESTORE, MIGRATE, SWAPDB, ...), plus
                   INFO and ROLE (both @dangerous, both read-only and needed); minus SELECT, MOVE
                   (database 0 only), FUNCTION/FCALL (server-resident code: EVAL only) and
                   SCRIPT FLUSH|DEBUG. Scripts run with the caller's ACL, command by command.
           (sentinels) `SCHEDULER_SENTINEL_RULES`: discovery and events only (SENTINEL
                   get-master-addr-by-name/master/replicas/sentinels, SUBSCRIBE to the event
                   channels such as `+switch-master`), no SENTINEL FAILOVER/SET/REMOVE/RESET.
  shoal-repl       (data)  `REPL_RULES`: what a replica sends to its primary (PSYNC, REPLCONF,
                   PING); every data node has `masteruser`/`masterauth` set, since any of them
                   can be made a replica by a failover.
  shoal-sentinel   (data)  `SENTINEL_DATA_RULES`: what Sentinel sends to monitored instances
                   (the Redis docs' "Redis Sentinel ACL" list) on channel `__sentinel__:hello`,
                   no keys; Sentinels use it through `sentinel auth-user`/`auth-pass`.
           (sentinels) `+@all`: the Sentinels' peer user (`sentinel sentinel-user/-pass`).
  shoal-admin      (both)  `+@all` on every key and channel: the fixture's and tests' own
                   control connection (`cli()`'s default), never given to a Shoal daemon.

Sentinel: `sentinel monitor <name> <host> <port> <quorum=2>`, down-after 2000 ms, failover-timeout
5000 ms, parallel-syncs 1. (With 1000 ms, on a loaded machine, a Sentinel once found the primary it
had just promoted silent for a second, probably in the fsync of its CONFIG REWRITE, and failed back
to the empty old primary restarted beside it: the writes since were lost.) A failover after a
SIGKILL of the primary takes about 3-5 s here
(1 s to subjective down, objective down and leader election, promotion); when an election splits
the votes, the next try comes after 2 x failover-timeout. A killed old primary restarted with
its own config comes back as an (empty) primary; Sentinel converts it to a replica only after it
has reported that role for 8 s (SENTINEL_PUBLISH_PERIOD * 4) on two INFO replies (every 10 s):
`restart(addr, replica_of=...)` starts it as a replica instead, as an orchestrator would.

Lifecycle: `RedisHA(dir, ...)` (or `RedisHA.single(dir)`: one Redis, no replica, no Sentinel),
`start()`, then `kill_primary()`/`wait_failover()`, `stop_all()`/`start_again()`, `restart()`;
`stop()` tears down for good (the directory stays, its owner removes it). Not thread-safe.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

from .procs import Daemon, FixtureError, free_port, free_port_in_netns, run, wait_until

ADMIN = "shoal-admin"
SCHEDULER = "shoal-scheduler"
REPL = "shoal-repl"
SENTINEL = "shoal-sentinel"

DEFAULT_RULES = "off resetpass resetkeys resetchannels -@all"
SCHEDULER_RULES = ("resetkeys ~shoal:* resetchannels &shoal:* -@all "
                   "+@read +@write +@stream +@transaction +@scripting +@pubsub +@connection "
                   "-@admin -@dangerous +info +role +time "
                   "-select -move -function -fcall -fcall_ro -script|flush -script|debug")
REPL_RULES = "resetkeys resetchannels -@all +psync +replconf +ping"
SENTINEL_DATA_RULES = ("resetkeys resetchannels &__sentinel__:hello -@all +auth +hello +ping "
                       "+info +role +multi +exec +slaveof +replicaof +config|rewrite "
                       "+client|setname +client|kill +script|kill +subscribe +publish")
ADMIN_RULES = "allkeys allchannels +@all"
SCHEDULER_SENTINEL_RULES = ("resetkeys allchannels -@all +auth +hello +ping +role +info "
                            "+client|setname +client|getname +client|id "
                            "+subscribe +psubscribe +unsubscribe +punsubscribe "
                            "+sentinel|get-master-addr-by-name +sentinel|master "
                            "+sentinel|masters +sentinel|replicas +sentinel|slaves "
                            "+sentinel|sentinels +sentinel|ckquorum +sentinel|myid")
SENTINEL_PEER_RULES = "allkeys allchannels +@all"


class RedisError(FixtureError):
    """A command got an error reply (or could not authenticate, or not connect)."""


class Addr(NamedTuple):
    """A server's address; compares equal to a plain (host, port) tuple."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def redis_binary(name: str) -> str:
    """Path of redis-server, redis-sentinel or redis-cli; FixtureError if not installed."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                  else None)
    if path is None:
        raise FixtureError(f"{name} is not installed: run tools/install-deps")
    return path


@dataclass
class RedisNode:
    """One redis-server or redis-sentinel: its kind, port, directory, config and daemon."""

    kind: str            # "data" or "sentinel"
    name: str            # "primary", "replica-0", "sentinel-1"
    host: str
    port: int
    dir: Path
    daemon: Daemon | None = None

    @property
    def addr(self) -> Addr:
        return Addr(self.host, self.port)

    @property
    def conf(self) -> Path:
        return self.dir / ("sentinel.conf" if self.kind == "sentinel" else "redis.conf")

    @property
    def log(self) -> Path:
        return self.dir / f"{'sentinel' if self.kind == 'sentinel' else 'redis'}.log"

    @property
    def alive(self) -> bool:
        return self.daemon is not None and self.daemon.alive


class RedisHA:
    """A Redis primary, `replicas` replicas and `sentinels` Sentinels (see the module docstring)."""

    name = "redis-ha"

    def __init__(self, directory: str | os.PathLike, *, replicas: int = 1, sentinels: int = 3,
                 host: str = "127.0.0.1", netns: str | None = None, master_name: str = "shoal",
                 quorum: int = 2, down_after_ms: int = 2000, failover_timeout_ms: int = 5000,
                 appendonly: bool = False, extra_config: Sequence[str] = (),
                 tls: object = None) -> None:
        """tls: a certs.TLSParty (ClusterPKI.redis): every data node and Sentinel then listens
        with TLS only (`port 0`, `tls-port`), requires a client certificate of its CA
        (`tls-auth-clients yes`), replicates and monitors over TLS (`tls-replication yes`), and
        `cli()` presents the party's certificate."""
        if sentinels and sentinels < quorum:
            raise ValueError(f"{sentinels} sentinels cannot reach quorum {quorum}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host, self.netns = host, netns
        self.master_name = master_name
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.appendonly = appendonly
        self.extra_config = list(extra_config)
        self.tls = tls
        self.users = {u: secrets.token_hex(16) for u in (ADMIN, SCHEDULER, REPL, SENTINEL)}
        self.data_nodes = [RedisNode("data", "primary", host, 0, self.dir / "primary")] + [
            RedisNode("data", f"replica-{i}", host, 0, self.dir / f"replica-{i}")
            for i in range(replicas)]
        self.sentinel_nodes = [RedisNode("sentinel", f"sentinel-{i}", host, 0,
                                         self.dir / f"sentinel-{i}") for i in range(sentinels)]
        self._stopped: list[RedisNode] = []
        self.started_pids: list[int] = []  # every daemon ever started, for leak checks

    @classmethod
    def single(cls, directory: str | os.PathLike, **kwargs: object) -> "RedisHA":
        """One Redis (same users and ACLs), no replica, no Sentinel."""
        return cls(directory, replicas=0, sentinels=0, **kwargs)  # type: ignore[arg-type]

    # -- credentials -----------------------------------------------------------------------------

    @property
    def scheduler_user(self) -> str:
        """User name the scheduler authenticates with, to data nodes and to Sentinels alike."""
        return SCHEDULER

    @property
    def scheduler_password(self) -> str:
        return self.users[SCHEDULER]

    def scheduler_section(self, password_file: str | os.PathLike, **extra: object) -> dict:
        """The scheduler's `redis` section for this Redis: its sentinels, the scheduler's user on
        them and on the data nodes, and its password, written to `password_file` (mode 0600).
        `extra` adds keys (lease_ttl, wait_replicas, ...)."""
        pw = Path(password_file)
        pw.write_text(self.scheduler_password + "\n")
        os.chmod(pw, 0o600)
        return {"sentinels": [f"{a.host}:{a.port}" for a in self.sentinel_addrs()],
                "master_name": "shoal", "user": self.scheduler_user, "password_file": str(pw),
                "sentinel_user": self.scheduler_user, "sentinel_password_file": str(pw), **extra}

    @property
    def admin_user(self) -> str:
        return ADMIN

    @property
    def admin_password(self) -> str:
        return self.users[ADMIN]

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 30) -> "RedisHA":
        """Starts the primary, then the replicas (waits for `master_link_status:up`), then the
        Sentinels (waits until each knows the primary, every replica and the other Sentinels)."""
        deadline = time.monotonic() + timeout
        try:
            primary = self.data_nodes[0]
            self._launch(primary, deadline)
            for node in self.data_nodes[1:]:
                self._launch(node, deadline, replica_of=primary.addr)
            for node in self.data_nodes[1:]:
                self.wait_replica(node.addr, primary.addr, timeout=_left(deadline))
            for node in self.sentinel_nodes:
                self._launch(node, deadline)
            self._wait_sentinels_ready(primary.addr, [n.addr for n in self.data_nodes[1:]],
                                       _left(deadline))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every daemon (Sentinels first, so they do not react to the data nodes going)."""
        for node in [*self.sentinel_nodes, *reversed(self.data_nodes)]:
            if node.daemon is not None:
                node.daemon.stop(timeout=5)

    def __enter__(self) -> "RedisHA":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop_all(self, kill: bool = False) -> None:
        """Redis entirely down: stops (SIGTERM, or SIGKILL with `kill`) every running Sentinel
        (first, so none reacts) and data node; `start_again()` brings exactly those back."""
        self._stopped = [n for n in [*self.sentinel_nodes, *self.data_nodes] if n.alive]
        for node in self._stopped:
            assert node.daemon is not None
            if kill:
                node.daemon.kill()
            else:
                node.daemon.stop(timeout=5)

    def start_again(self, timeout: float = 30) -> Addr | None:
        """Restarts what `stop_all()` stopped, on the same ports with the configs as last
        rewritten: data nodes first, then Sentinels. Waits as `start()` does, for the node whose
        ROLE is master. Returns that primary's address (None without data nodes)."""
        deadline = time.monotonic() + timeout
        stopped, self._stopped = self._stopped, []
        data = [n for n in stopped if n.kind == "data"]
        for node in data:
            self._start_daemon(node)
        for node in data:
            self._wait_ping(node, deadline)
        primary = None
        for node in data:
            if self.role(node.addr)[0] == "master":
                primary = node.addr
        replicas = [n.addr for n in data if n.addr != primary]
        if primary is not None:
            for addr in replicas:
                self.wait_replica(addr, primary, timeout=_left(deadline))
        sentinels = [n for n in stopped if n.kind == "sentinel"]
        for node in sentinels:
            self._start_daemon(node)
        for node in sentinels:
            self._wait_ping(node, deadline)
        if sentinels and primary is not None:
            self._wait_sentinels_ready(primary, replicas, _left(deadline))
        return primary

    def kill(self, addr: Addr | tuple[str, int]) -> None:
        """SIGKILL to the node (data node or Sentinel) at `addr`."""
        node = self.node(addr)
        if node.daemon is not None:
            node.daemon.kill()

    def restart(self, addr: Addr | tuple[str, int], *, replica_of: Addr | tuple[str, int] | None
                = None, timeout: float = 20) -> None:
        """Starts the (stopped or killed) node at `addr` again on its port with its config as last
        rewritten. `replica_of` first replaces the config's `replicaof` line (the restart an
        orchestrator does after a failover) and then waits until the node's link is up."""
        node = self.node(addr)
        if node.alive:
            raise FixtureError(f"{node.name} at {node.addr} is still running")
        if replica_of is not None:
            _set_replicaof(node.conf, Addr(*replica_of))
        deadline = time.monotonic() + timeout
        self._start_daemon(node)
        self._wait_ping(node, deadline)
        if replica_of is not None:
            self.wait_replica(node.addr, Addr(*replica_of), timeout=_left(deadline))

    # -- topology --------------------------------------------------------------------------------

    def node(self, addr: Addr | tuple[str, int]) -> RedisNode:
        for n in [*self.data_nodes, *self.sentinel_nodes]:
            if n.addr == tuple(addr):
                return n
        raise FixtureError(f"no Redis node at {addr}")

    def data_addrs(self) -> list[Addr]:
        return [n.addr for n in self.data_nodes]

    def sentinel_addrs(self) -> list[Addr]:
        return [n.addr for n in self.sentinel_nodes]

    def primary_addr(self) -> Addr:
        """The primary as the first answering Sentinel names it (SENTINEL
        get-master-addr-by-name); without Sentinels, the data node started as primary."""
        if not self.sentinel_nodes:
            return self.data_nodes[0].addr
        errors = []
        for s in self.sentinel_nodes:
            if not s.alive:
                continue
            try:
                return self.sentinel_master_addr(s.addr)
            except RedisError as e:
                errors.append(f"{s.name}: {e}")
        raise FixtureError("no Sentinel names the primary: " + "; ".join(errors or ["none runs"]))

    def sentinel_master_addr(self, sentinel: Addr | tuple[str, int]) -> Addr:
        """What one Sentinel answers to SENTINEL get-master-addr-by-name."""
        out = self.cli("SENTINEL", "get-master-addr-by-name", self.master_name, addr=sentinel,
                       timeout=5).split()
        if len(out) != 2:
            raise RedisError(f"{sentinel} does not know master {self.master_name!r}: {out}")
        return Addr(out[0], int(out[1]))

    def kill_primary(self) -> Addr:
        """SIGKILL to the current primary (as the Sentinels name it); returns its address."""
        addr = self.primary_addr()
        node = self.node(addr)
        if not node.alive:
            raise FixtureError(f"primary {addr} ({node.name}) is not running")
        self.kill(addr)
        return addr

    def wait_failover(self, old_addr: Addr | tuple[str, int], timeout: float = 30, *,
                      all_sentinels: bool = True) -> Addr:
        """Waits until a Sentinel names a primary other than `old_addr` and ROLE on that node says
        master; returns the new primary's address. With `all_sentinels` (the default) also until
        every running Sentinel names that primary (the others learn it from the winner's hello
        messages, within ~2 s), so `primary_addr()` then agrees with the returned address."""
        old = Addr(*old_addr)

        def promoted() -> Addr | None:
            named = []
            for s in self.sentinel_nodes:
                if not s.alive:
                    continue
                try:
                    named.append(self.sentinel_master_addr(s.addr))
                except RedisError:
                    named.append(None)
            for addr in dict.fromkeys(a for a in named if a is not None and a != old):
                if all_sentinels and any(a != addr for a in named):
                    continue
                if self.role(addr)[0] == "master":
                    return addr
            return None
        if not self.sentinel_nodes:
            raise FixtureError("wait_failover needs Sentinels")
        what = f"failover away from {old}" + (" seen by every Sentinel" if all_sentinels else "")
        return wait_until(promoted, timeout, what, interval=0.1,
                          diagnostics=lambda: self.diagnostics(25))  # type: ignore[return-value]

    def wait_replica(self, addr: Addr | tuple[str, int], primary: Addr | tuple[str, int] | None
                     = None, timeout: float = 20) -> None:
        """Waits until the node at `addr` is a replica (of `primary`, when given) whose link to
        its primary is up (INFO replication: master_link_status:up)."""
        node = self.node(addr)

        def linked() -> bool:
            if node.daemon is not None:
                node.daemon.check_alive("replicating")
            info = self.info(addr, "replication")
            if info.get("role") != "slave" or info.get("master_link_status") != "up":
                return False
            return primary is None or \
                (info.get("master_host"), int(info.get("master_port", 0))) == tuple(primary)
        wait_until(linked, timeout, f"{node.name} at {addr} replicating from {primary or 'any'}",
                   interval=0.05, diagnostics=lambda: self._node_diag(node))

    # -- commands --------------------------------------------------------------------------------

    def cli(self, *args: str | int, addr: Addr | tuple[str, int] | None = None,
            user: str | None = ADMIN, password: str | None = None, timeout: float = 10,
            check: bool = True) -> str:
        """Runs one command with redis-cli (raw output: array elements one per line, nil as an
        empty line); returns stdout without its final newline. `addr` defaults to the current
        primary; `user` None connects unauthenticated (as `default`); `password` overrides the
        user's own. An error reply, a failed AUTH or a failed connection raise RedisError, or
        with `check=False` are returned as text."""
        target = Addr(*addr) if addr is not None else self.primary_addr()
        argv, env = self._cli_argv(target, user, password)
        cp = run([*argv, "-e", *[str(a) for a in args]], netns=self.netns, timeout=timeout,
                 check=False, env=env, what=f"redis-cli {args[:1]} at {target}")
        err = _auth_failure(cp.stderr)
        if err is None and cp.returncode != 0:
            err = (cp.stderr.strip() or cp.stdout.strip() or f"exit status {cp.returncode}")
        if err is not None:
            if check:
                raise RedisError(f"{' '.join(map(str, args))} at {target} as {user}: {err}")
            return err
        return cp.stdout[:-1] if cp.stdout.endswith("\n") else cp.stdout

    def cli_session(self, commands: Sequence[Sequence[str | int]], *,
                    addr: Addr | tuple[str, int] | None = None, user: str | None = ADMIN,
                    password: str | None = None, timeout: float = 10) -> list[str]:
        """Runs `commands` in order on one connection (needed for WAIT, MULTI/EXEC); returns
        one raw reply text per command. An error reply is returned as its text ("NOPERM ...");
        a failed AUTH or connection raises RedisError."""
        target = Addr(*addr) if addr is not None else self.primary_addr()
        argv, env = self._cli_argv(target, user, password)
        sep = f"<shoal-reply-{secrets.token_hex(4)}>"
        script = "".join(" ".join(_quote(str(a)) for a in cmd) + "\n" for cmd in commands)
        cp = run([*argv, "-D", sep], netns=self.netns, timeout=timeout, check=False, env=env,
                 input=script.encode(), what=f"redis-cli session at {target}")
        err = _auth_failure(cp.stderr)
        if err is None and cp.returncode != 0:
            err = cp.stderr.strip() or f"exit status {cp.returncode}"
        if err is not None:
            raise RedisError(f"session at {target} as {user}: {err}")
        replies = [r[:-1] if r.endswith("\n") else r for r in cp.stdout.split(sep)[:-1]]
        if len(replies) != len(commands):
            raise RedisError(f"session at {target}: {len(replies)} replies to {len(commands)} "
                             f"commands: {cp.stdout[-1000:]!r} {cp.stderr[-1000:]!r}")
        return replies

    def role(self, addr: Addr | tuple[str, int]) -> list[str]:
        """ROLE, flattened: ["master", offset, ...] or ["slave", host, port, state, offset]."""
        return self.cli("ROLE", addr=addr, timeout=5).splitlines()

    def info(self, addr: Addr | tuple[str, int], section: str = "") -> dict[str, str]:
        """INFO [section] as a dict."""
        out = self.cli("INFO", *([section] if section else []), addr=addr, timeout=5)
        return dict(line.split(":", 1) for line in out.splitlines()
                    if ":" in line and not line.startswith("#"))

    def sentinel_master(self, sentinel: Addr | tuple[str, int]) -> dict[str, str]:
        """SENTINEL MASTER <name> of one Sentinel as a dict (flags, num-slaves, ...)."""
        return _pairs(self.cli("SENTINEL", "MASTER", self.master_name, addr=sentinel,
                               timeout=5).splitlines())

    def sentinel_replicas(self, sentinel: Addr | tuple[str, int]) -> dict[Addr, dict[str, str]]:
        """SENTINEL REPLICAS <name> of one Sentinel: address → its fields (flags, ...)."""
        lines = self.cli("SENTINEL", "REPLICAS", self.master_name, addr=sentinel,
                         timeout=5).splitlines()
        out: dict[Addr, dict[str, str]] = {}
        starts = [i for i in range(0, len(lines), 2) if lines[i] == "name"] + [len(lines)]
        for a, b in zip(starts, starts[1:]):
            fields = _pairs(lines[a:b])
            out[Addr(fields["ip"], int(fields["port"]))] = fields
        return out

    # -- diagnostics -----------------------------------------------------------------------------

    def diagnostics(self, lines: int = 30) -> str:
        return "\n".join(self._node_diag(n, lines)
                         for n in [*self.data_nodes, *self.sentinel_nodes] if n.daemon)

    def _node_diag(self, node: RedisNode, lines: int = 30) -> str:
        if node.daemon is None:
            return f"--- {node.name}: never started"
        return node.daemon.diagnostics(lines)

    # -- internals -------------------------------------------------------------------------------

    def _cli_argv(self, target: Addr, user: str | None,
                  password: str | None) -> tuple[list[str], dict[str, str]]:
        argv = [redis_binary("redis-cli"), "-h", target.host, "-p", str(target.port)]
        if self.tls is not None:
            argv += ["--tls", "--cacert", str(self.tls.ca), "--cert", str(self.tls.cert.cert),
                     "--key", str(self.tls.cert.key)]
        env: dict[str, str] = {}
        if user is not None:
            # REDISCLI_AUTH keeps the password out of the process list.
            argv += ["--user", user, "--no-auth-warning"]
            env["REDISCLI_AUTH"] = password if password is not None else self.users.get(user, "")
        return argv, env

    def _launch(self, node: RedisNode, deadline: float, *, replica_of: Addr | None = None
                ) -> None:
        """Picks a free port, writes the config, starts and waits for PING; retries on a new
        port when another process took the picked one in between."""
        for attempt in range(3):
            node.port = free_port_in_netns(self.netns, self.host) if self.netns \
                else free_port(self.host)
            node.dir.mkdir(parents=True, exist_ok=True)
            node.conf.write_text(self._sentinel_conf(node) if node.kind == "sentinel"
                                 else self._data_conf(node, replica_of))
            self._start_daemon(node)
            try:
                self._wait_ping(node, deadline)
                return
            except FixtureError:
                assert node.daemon is not None
                if node.daemon.alive or "Address already in use" not in node.daemon.log_text() \
                        or attempt == 2:
                    raise

    def _start_daemon(self, node: RedisNode) -> None:
        binary = redis_binary("redis-sentinel" if node.kind == "sentinel" else "redis-server")
        node.daemon = Daemon(f"{node.name} ({node.kind} {node.host}:{node.port})",
                             [binary, node.conf], log_path=node.log, cwd=node.dir,
                             netns=self.netns).start()
        assert node.daemon.pid is not None
        self.started_pids.append(node.daemon.pid)

    def _wait_ping(self, node: RedisNode, deadline: float) -> None:
        def pong() -> bool:
            assert node.daemon is not None
            node.daemon.check_alive("answering PING")
            return self.cli("PING", addr=node.addr, timeout=5) == "PONG"
        wait_until(pong, _left(deadline), f"{node.name} at {node.addr} answering PING",
                   interval=0.05, diagnostics=lambda: self._node_diag(node))

    def _wait_sentinels_ready(self, primary: Addr, replicas: Sequence[Addr],
                              timeout: float) -> None:
        """Every running Sentinel names `primary` (flags exactly "master"), sees every address in
        `replicas` as a healthy replica (flags "slave", link ok), has had an INFO reply from each
        since it started, and knows every other Sentinel."""
        live = [s for s in self.sentinel_nodes if s.alive]
        want_peers = len(self.sentinel_nodes) - 1
        state: dict[str, str] = {}

        def ready() -> bool:
            for s in live:
                assert s.daemon is not None
                s.daemon.check_alive("monitoring")
                m = self.sentinel_master(s.addr)
                seen = self.sentinel_replicas(s.addr)
                state[s.name] = (f"master {m.get('ip')}:{m.get('port')} flags {m.get('flags')} "
                                 f"peers {m.get('num-other-sentinels')} replicas "
                                 + ", ".join(f"{a} {f.get('flags')} {f.get('master-link-status')}"
                                             for a, f in seen.items()))
                # info-refresh 0: no INFO reply yet, the state is only what the config said.
                if (Addr(m["ip"], int(m["port"])) != primary or m["flags"] != "master"
                        or m["info-refresh"] == "0"
                        or int(m["num-other-sentinels"]) < want_peers):
                    return False
                for r in replicas:
                    f = seen.get(r)
                    if f is None or f["flags"] != "slave" or f["info-refresh"] == "0" \
                            or f["master-link-status"] != "ok":
                        return False
            return True
        wait_until(ready, timeout, f"Sentinels monitoring {primary} with {len(replicas)} "
                   f"replica(s) and {want_peers} peer(s) each", interval=0.1,
                   diagnostics=lambda: "\n".join(f"{k}: {v}" for k, v in state.items())
                   + "\n" + self.diagnostics(20))

    def _user_lines(self, sentinel: bool) -> list[str]:
        rules = {SCHEDULER: SCHEDULER_SENTINEL_RULES, SENTINEL: SENTINEL_PEER_RULES,
                 ADMIN: ADMIN_RULES} if sentinel else \
            {SCHEDULER: SCHEDULER_RULES, REPL: REPL_RULES, SENTINEL: SENTINEL_DATA_RULES,
             ADMIN: ADMIN_RULES}
        return [f"user default {DEFAULT_RULES}"] + [
            f"user {name} on resetpass >{self.users[name]} {rule}" for name, rule in rules.items()]

    def _listen_lines(self, node: RedisNode) -> list[str]:
        """`port`, or with TLS `port 0` and the tls-* lines (both kinds of daemon take them)."""
        if self.tls is None:
            return [f"port {node.port}"]
        return ["port 0", f"tls-port {node.port}", f"tls-cert-file {self.tls.cert.cert}",
                f"tls-key-file {self.tls.cert.key}", f"tls-ca-cert-file {self.tls.ca}",
                "tls-auth-clients yes", "tls-replication yes"]

    def _data_conf(self, node: RedisNode, replica_of: Addr | None) -> str:
        lines = [
            f"bind {node.host}", *self._listen_lines(node), "daemonize no", 'logfile ""',
            "loglevel notice", f"dir {node.dir}", 'save ""',
            f"appendonly {'yes' if self.appendonly else 'no'}",
            "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
            "repl-diskless-load swapdb", "rdb-del-sync-files yes", "enable-debug-command local",
            f"replica-announce-ip {node.host}",
            f"masteruser {REPL}", f"masterauth {self.users[REPL]}",
            *self._user_lines(sentinel=False), *self.extra_config]
        if replica_of is not None:
            lines.append(f"replicaof {replica_of.host} {replica_of.port}")
        return "\n".join(lines) + "\n"

    def _sentinel_conf(self, node: RedisNode) -> str:
        p, m = self.data_nodes[0].addr, self.master_name
        return "\n".join([
            f"bind {node.host}", *self._listen_lines(node), "daemonize no", 'logfile ""',
            f"dir {node.dir}", "sentinel resolve-hostnames no",
            *self._user_lines(sentinel=True),
            f"sentinel sentinel-user {SENTINEL}", f"sentinel sentinel-pass {self.users[SENTINEL]}",
            f"sentinel monitor {m} {p.host} {p.port} {self.quorum}",
            f"sentinel down-after-milliseconds {m} {self.down_after_ms}",
            f"sentinel failover-timeout {m} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {m} 1",
            f"sentinel auth-user {m} {SENTINEL}", f"sentinel auth-pass {m} {self.users[SENTINEL]}",
        ]) + "\n"


def _left(deadline: float) -> float:
    return max(0.1, deadline - time.monotonic())


def _pairs(lines: Sequence[str]) -> dict[str, str]:
    return dict(zip(lines[0::2], lines[1::2]))


def _auth_failure(stderr: str) -> str | None:
    """redis-cli reports a failed AUTH on stderr and then runs the command anyway (as the
    default user, which is off here): the AUTH failure is the error to report."""
    for line in stderr.splitlines():
        if line.startswith("AUTH failed"):
            return line.strip()
    return None


def _quote(arg: str) -> str:
    """One argument for a redis-cli stdin line (sdssplitargs syntax)."""
    out = []
    for b in arg.encode():
        c = chr(b)
        out.append("\\" + c if c in '"\\' else c if 32 <= b < 127 else f"\\x{b:02x}")
    return '"' + "".join(out) + '"'


def _set_replicaof(conf: Path, primary: Addr) -> None:
    """Replaces the `replicaof`/`slaveof` line of a redis.conf."""
    lines = [line for line in conf.read_text().splitlines()
             if not line.split(maxsplit=1)[:1] or
             line.split(maxsplit=1)[0].lower() not in ("replicaof", "slaveof")]
    lines.append(f"replicaof {primary.host} {primary.port}")
    conf.write_text("\n".join(lines) + "\n")

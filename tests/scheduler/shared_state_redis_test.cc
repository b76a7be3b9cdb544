// Two scheduler replicas in one process (each its own index, tracker and prewarm manager) on a
// real redis-server started by the test: a prewarm created on one is handed out by the other, a
// node's reports sent to one show in the other's progress, a replica started later loads both,
// and a heartbeat retried after its first attempt was applied is a resync, never a double apply.
// Skipped when redis-server is not installed. The multi-process cases with Sentinel are in
// ha_test.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "scheduler/ingest.h"
#include "checkpoint_util.h"
#include "scheduler/origins.h"
#include "scheduler/shared_state.h"
#include "test_util.h"

extern char** environ;

namespace shoal::scheduler {
namespace {

using namespace testing;

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(s);
  return port;
}

class RedisServer {
 public:
  RedisServer() : port_(free_port()) {
    if (!std::filesystem::exists("/usr/bin/redis-server")) return;
    std::string p = std::to_string(port_);
    std::vector<std::string> args{
        "/usr/bin/redis-server", "--port", p,       "--bind", "127.0.0.1", "--save",   "",
        "--appendonly",          "no",     "--dir", "/tmp",   "--logfile", "/dev/null"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = 0;
    redis_options o;
    o.address = address();
    for (int i = 0; i < 100 && pid_ != 0; ++i) {
      redis_conn c(o);
      if (auto r = c.command({"PING"}); r && r->str == "PONG") {
        up_ = true;
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
  }
  ~RedisServer() {
    if (pid_ != 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  [[nodiscard]] bool up() const { return up_; }
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_;
  pid_t pid_ = 0;
  bool up_ = false;
};

// One replica: its own soft state, sharing through Redis.
struct replica {
  explicit replica(const std::string& address, const std::string& id,
                   const std::function<void(shared_state_options&)>& tune = {})
      : idx(index_options{}, "local"),
        pw(idx, prewarm_options{}),
        cat(checkpoint_catalog_options{}) {
    cat.on_registered([this](const std::string&, const std::string& key) { told.push_back(key); });
    shared_state_options so;
    so.redis.address = address;
    so.replica_id = id;
    so.wait_replicas = 0;  // a lone Redis
    if (tune) tune(so);
    shared = std::make_unique<shared_state>(so, idx, trk, reg);
    shared->attach(pw);
    shared->attach(cat);
    shared->start();
  }
  ~replica() { shared->stop(); }
  cluster_index idx;
  tracker trk{tracker_options{}};
  prewarm_manager pw;
  checkpoint_catalog cat;
  std::vector<std::string> told;  // the catalog's listener calls
  metrics::registry reg;
  std::unique_ptr<shared_state> shared;
};

template <class F>
bool eventually(F f) {
  for (int i = 0; i < 100; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

TEST(SharedStateRedis, PrewarmsAndReportsGoThroughEveryReplica) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  replica a(redis.address(), "a"), b(redis.address(), "b");
  EXPECT_EQ(a.idx.epoch(), b.idx.epoch());
  EXPECT_TRUE(a.shared->stale_reason().empty()) << a.shared->stale_reason();

  auto m = full_hb("n1", {held("l1", 100)}, {}, 1, "");
  auto r = a.shared->heartbeat(m);
  ASSERT_FALSE(r.stale);
  ASSERT_TRUE(r.out.full);
  ASSERT_TRUE(a.pw.create("pw-7", {image_plan("n1", "pw-7")}, {{"images", {"app:v1"}}}));
  // Created through A, known to B at once (A waited for its own apply; B reads the same log).
  ASSERT_TRUE(eventually([&] { return b.pw.progress("pw-7").has_value(); }));
  EXPECT_EQ((*b.pw.progress("pw-7"))["nodes"][0]["bytes_present"], 100);
  // The node heartbeats to B: B hands the order out.
  auto m2 = delta_hb("n1", 2, r.epoch, {});
  auto r2 = b.shared->heartbeat(m2);
  EXPECT_FALSE(r2.out.resync) << r2.out.resync_reason;
  auto orders = b.pw.on_heartbeat("n1", m2.orders, m2.schema);
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].id, "pw-7.0");
  EXPECT_EQ(orders[0].objects.size(), 2u);
  // Its report and new object, sent to B, show in A's progress.
  auto m3 = delta_hb("n1", 3, r.epoch, {held("l2", 300)});
  m3.orders = {{"pw-7.0", heartbeat::order_state::done, 400, 400, ""}};
  ASSERT_FALSE(b.shared->heartbeat(m3).out.resync);
  ASSERT_TRUE(eventually([&] { return (*a.pw.progress("pw-7"))["state"] == "done"; }))
      << a.pw.progress("pw-7")->dump();

  // A replica started now loads the node and the prewarm.
  replica c(redis.address(), "c");
  auto n = c.idx.node("n1");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->objects, 2u);
  ASSERT_TRUE(c.pw.progress("pw-7"));

  // The same delta again (a retry after its first attempt was applied): a gap, nothing doubled.
  auto again = c.shared->heartbeat(m3);
  EXPECT_FALSE(again.stale)
      << "a replica just started judged it alone, so nobody else learns of it";
  EXPECT_TRUE(again.out.resync);
  EXPECT_EQ(again.out.resync_reason, "gap");
  ASSERT_TRUE(eventually([&] { return !a.idx.node("n1")->synced; }));
  EXPECT_EQ(a.idx.node("n1")->objects, 2u);
}

// A replica started against a state that takes longer to load than its "Redis unreachable"
// give-up (a few Redis timeouts, here 0.44 s) returns from start() only with every node loaded:
// it must not open its port answering from part of the index. 5,000 nodes x 100 objects, written
// straight into Redis as the heartbeat script would have.
// A heartbeat is applied by the replica that received it before it answers, without waiting for
// its log reader (which reads the other replicas' entries in batches, here of a second); when the
// node's previous heartbeat went to another replica and is not read here yet, the replica waits
// for its reader instead, so every replica applies a node's heartbeats in the log's order.
TEST(SharedStateRedis, AHeartbeatIsAppliedWhereReceivedAtOnceAndInTheLogsOrderEverywhere) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  auto slow_reader = [](shared_state_options& so) { so.read_batch = 1000ms; };
  replica a(redis.address(), "a", slow_reader), b(redis.address(), "b", slow_reader);
  auto waited = [](replica& r) {
    const std::string name = "\nshoal_scheduler_heartbeats_waited_total ";
    auto text = r.reg.expose();
    auto at = text.find(name);
    if (at == std::string::npos) return std::string("(missing)");
    at += name.size();
    return text.substr(at, text.find('\n', at) - at);
  };
  auto holds = [](replica& r, std::string_view name) {
    auto o = r.idx.object(dg(name));
    return o && !o->holders.empty();
  };
  auto r1 = a.shared->heartbeat(full_hb("n1", {held("l1", 100)}));
  ASSERT_FALSE(r1.stale);
  auto r2 = a.shared->heartbeat(delta_hb("n1", 2, r1.epoch, {held("l2", 200)}));
  ASSERT_FALSE(r2.out.resync) << r2.out.resync_reason;
  // Applied by A at once (its reader sleeps out its batch), never waited for.
  EXPECT_TRUE(holds(a, "l1") && holds(a, "l2"));
  EXPECT_EQ(waited(a), "0");
  // B's reader, in its batch wait, has not read A's second heartbeat; a placement's catch_up()
  // reads the log to its end at once.
  b.shared->catch_up();
  EXPECT_TRUE(holds(b, "l2"));
  // The node moves to B, whose reader may not have read A's second entry: B applies the log in
  // order before answering.
  auto r3 = b.shared->heartbeat(delta_hb("n1", 3, r1.epoch, {held("l3", 300)}, {dg("l1")}));
  ASSERT_FALSE(r3.out.resync) << r3.out.resync_reason;
  EXPECT_FALSE(holds(b, "l1"));
  EXPECT_TRUE(holds(b, "l2") && holds(b, "l3"));
  // Back to A, which has not read B's entry (its reader is in its batch wait): it waits for it,
  // then holds exactly what the node reported.
  auto r4 = a.shared->heartbeat(delta_hb("n1", 4, r1.epoch, {held("l4", 400)}));
  ASSERT_FALSE(r4.out.resync) << r4.out.resync_reason;
  EXPECT_EQ(waited(a), "1");
  EXPECT_FALSE(holds(a, "l1"));
  EXPECT_TRUE(holds(a, "l2") && holds(a, "l3") && holds(a, "l4"));
  // And B, in its own time, the same (it applies A's fourth entry once, from the log).
  EXPECT_TRUE(eventually([&] { return holds(b, "l4"); }));
  EXPECT_FALSE(holds(b, "l1"));
  EXPECT_EQ(a.idx.node("n1")->seq, 4u);
  EXPECT_EQ(b.idx.node("n1")->seq, 4u);
}

// A node's netsetup document (some 22 KB for an H100 node, in every heartbeat) is kept once per
// node in Redis: the shared log carries it only when it changed ("=" otherwise), every replica
// still has the node's current document, and a replica started later loads it from the record.
// A node's delta may say its document is unchanged (netsetup_unchanged, "=" below): the same.
TEST(SharedStateRedis, TheNetsetupDocumentTravelsOnceAndEveryReplicaHasIt) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  replica a(redis.address(), "a"), b(redis.address(), "b");
  const std::string doc1 = R"({"validation":{"passed":true,"settings":{"mtu":4200}},"pad":")" +
                           std::string(20000, 'x') + R"("})";
  const std::string doc2 = R"({"validation":{"passed":false,"error":"PFC off"}})";
  std::uint64_t seq = 1;
  auto doc_of = [](const replica& r) {
    auto n = r.idx.node("n1");
    return n ? n->netsetup.str() : std::string("(node unknown)");
  };
  auto beat = [&](replica& r, const std::string& doc, const std::string& epoch) {
    auto m = seq == 1 ? full_hb("n1", {held("l1", 100)}) : delta_hb("n1", seq, epoch, {});
    ++seq;
    m.netsetup = doc == "=" ? "" : doc;
    m.netsetup_unchanged = doc == "=";
    auto res = r.shared->heartbeat(m);
    EXPECT_FALSE(res.stale);
    EXPECT_FALSE(res.out.resync) << res.out.resync_reason;
    return res.epoch;
  };
  auto epoch = beat(a, doc1, "");
  beat(a, "=", epoch);   // said unchanged
  beat(b, doc1, epoch);  // unchanged, through the other replica
  beat(a, doc2, epoch);  // changed
  beat(b, "=", epoch);   // said unchanged, through the other replica
  for (auto* r : {&a, &b}) {
    r->shared->catch_up();
    EXPECT_EQ(doc_of(*r), doc2);
  }
  // The log: the document in the entries where it changed, "=" in the others.
  redis_options o;
  o.address = redis.address();
  redis_conn c(o);
  auto log = c.command({"XRANGE", "shoal:log", "-", "+"});
  ASSERT_TRUE(log);
  std::vector<std::string> ns;
  for (const auto& e : log->elements) {
    const auto& f = e.elements[1].elements;
    for (std::size_t i = 0; i + 1 < f.size(); i += 2) {
      if (f[i].str == "t" && f[i + 1].str != "hb") break;
      if (f[i].str == "ns") ns.push_back(f[i + 1].str == "=" ? "=" : f[i + 1].str.substr(0, 30));
      if (f[i].str == "m") {
        EXPECT_EQ(f[i + 1].str.find("validation"), std::string::npos);
      }
    }
  }
  EXPECT_EQ(ns, (std::vector<std::string>{doc1.substr(0, 30), "=", "=", doc2.substr(0, 30), "="}));
  // Back to the first document, then none: both travel, and every replica follows.
  beat(b, doc1, epoch);
  beat(a, "", epoch);
  for (auto* r : {&a, &b}) {
    r->shared->catch_up();
    EXPECT_EQ(doc_of(*r), "");
  }
  beat(a, doc1, epoch);
  beat(b, "=", epoch);
  // A replica started now loads the node with its document (the record's, not the inventory's).
  replica late(redis.address(), "late");
  EXPECT_EQ(doc_of(late), doc1);
  b.shared->catch_up();
  EXPECT_EQ(doc_of(b), doc1);
}

TEST(SharedStateRedis, AStartWaitsForALoadUnderWayBeyondTheRedisTimeouts) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  redis_options o;
  o.address = redis.address();
  o.command_timeout = 10s;
  redis_conn c(o);
  ASSERT_TRUE(c.command({"SET", "shoal:epoch", "e1"}));
  // Heard just now (Redis's clock): the lease holder's expiry, which may run during the load,
  // must not take them for silent.
  auto t = c.command({"TIME"});
  ASSERT_TRUE(t);
  ASSERT_EQ(t->elements.size(), 2u);
  const std::string seen = std::to_string(std::stoull(t->elements[0].str) * 1000);
  const std::size_t nodes = 5000, per_node = 100;
  auto hex8 = [](std::size_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%08zx", v);
    return std::string(b);
  };
  std::vector<std::vector<std::string>> cmds;
  for (std::size_t n = 0; n < nodes; ++n) {
    const std::string name = "node-" + std::to_string(n);
    heartbeat::message inv;
    inv.node = name;
    inv.ip = "10.1." + std::to_string(n / 250) + "." + std::to_string(n % 250 + 1);
    inv.bt_port = 6881;
    std::vector<std::string> h{"HSET", "shoal:h:" + name};
    for (std::size_t k = 0; k < per_node; ++k) {
      h.push_back("sha256:" + std::string(64 - 8, '0') + hex8(n * per_node + k));
      h.push_back("1000 layer " + std::string(32, '0') + hex8(n * per_node + k));
    }
    cmds.push_back(std::move(h));
    cmds.push_back({"HSET", "shoal:n:" + name, "inv", heartbeat::encode(inv), "seq", "1", "synced",
                    "1", "endpoint", inv.ip + ":6881", "seen", seen, "log", "0-0"});
    cmds.push_back({"SADD", "shoal:nodes", name});
    if (cmds.size() >= 600) {
      ASSERT_TRUE(c.pipeline(cmds));
      cmds.clear();
    }
  }
  ASSERT_TRUE(c.pipeline(cmds));
  auto t0 = std::chrono::steady_clock::now();
  replica a(redis.address(), "a", [](shared_state_options& so) {
    so.redis.connect_timeout = 20ms;
    so.redis.command_timeout = 100ms;  // gives up on Redis after 2 x 20 + 4 x 100 ms
  });
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(a.shared->stale_reason().empty()) << a.shared->stale_reason();
  EXPECT_EQ(a.idx.stats().nodes, nodes)
      << "start() returned after " << std::chrono::duration<double>(took).count() << " s";
  EXPECT_EQ(a.idx.stats().holdings, nodes * per_node);
  // Not vacuous: the load did take longer than the give-up.
  EXPECT_GT(took, 440ms) << "the load was too quick to show anything; make the state bigger";
}

// The lease holder drops the Redis records of nodes silent for drop_after, found through the
// `seen` sorted set the heartbeat script keeps, and those of records written without it (an older
// release) through its full scan; a node that keeps heartbeating keeps its record.
TEST(SharedStateRedis, SilentNodesRecordsAreDroppedHeartbeatingOnesKept) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  redis_options o;
  o.address = redis.address();
  redis_conn c(o);
  // A record from before `seen` existed, silent for long: only the full scan finds it.
  ASSERT_TRUE(c.command({"HSET", "shoal:n:old", "seen", "1000", "seq", "1"}));
  ASSERT_TRUE(c.command({"SADD", "shoal:nodes", "old"}));
  replica a(redis.address(), "a", [](shared_state_options& so) {
    so.drop_after = 2s;
    so.lease_ttl = 1s;
  });
  auto r = a.shared->heartbeat(full_hb("silent", {held("l1", 100)}, {}, 1, ""));
  ASSERT_FALSE(r.stale);
  std::uint64_t seq = 1;
  ASSERT_FALSE(a.shared->heartbeat(full_hb("live", {held("l2", 100)}, {}, seq, r.epoch)).stale);
  auto exists = [&](const std::string& key) {
    auto e = c.command({"EXISTS", key});
    return e && e->integer == 1;
  };
  EXPECT_TRUE(exists("shoal:n:silent"));
  auto score = c.command({"ZSCORE", "shoal:seen", "silent"});
  ASSERT_TRUE(score);
  EXPECT_FALSE(score->is_nil()) << "the heartbeat script did not note the node in shoal:seen";
  // The first pass (5 s after the start, by the lease holder) scans every node, so "old" goes;
  // "silent" and "live" heartbeat meanwhile and stay.
  std::uint64_t silent_seq = 1;
  bool old_gone = false;
  for (int i = 0; i < 48 && !old_gone; ++i) {
    std::this_thread::sleep_for(250ms);
    ASSERT_FALSE(a.shared->heartbeat(delta_hb("live", ++seq, r.epoch, {})).out.resync);
    ASSERT_FALSE(a.shared->heartbeat(delta_hb("silent", ++silent_seq, r.epoch, {})).out.resync);
    old_gone = !exists("shoal:n:old");
  }
  ASSERT_TRUE(old_gone) << "a record without a shoal:seen entry is still in Redis after 12 s";
  EXPECT_TRUE(exists("shoal:n:silent"));
  // Then "silent" stops. The next full scan is a minute away: only shoal:seen can name it, once
  // it is 2 s silent (a pass every 5 s).
  bool silent_gone = false;
  for (int i = 0; i < 60 && !silent_gone; ++i) {
    std::this_thread::sleep_for(250ms);
    ASSERT_FALSE(a.shared->heartbeat(delta_hb("live", ++seq, r.epoch, {})).out.resync);
    silent_gone = !exists("shoal:n:silent");
  }
  EXPECT_TRUE(silent_gone) << "the silent node's record is still in Redis after 15 s";
  EXPECT_FALSE(exists("shoal:h:silent"));
  auto member = c.command({"SISMEMBER", "shoal:nodes", "silent"});
  ASSERT_TRUE(member);
  EXPECT_EQ(member->integer, 0);
  auto gone = c.command({"ZSCORE", "shoal:seen", "silent"});
  ASSERT_TRUE(gone);
  EXPECT_TRUE(gone->is_nil());
  EXPECT_TRUE(exists("shoal:n:live"));
  EXPECT_TRUE(exists("shoal:h:live"));
}

// Every replica records in Redis when it last called; a replica that starts while another
// serves learns when the service began, and one that starts after every replica was gone for
// longer than two lease periods starts the count again.
TEST(SharedStateRedis, ServingSinceOutlivesAReplicaAndStartsAgainAfterAGap) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  auto tune = [](shared_state_options& so) { so.lease_ttl = 1s; };
  auto since_of = [](replica& r) {
    std::optional<std::chrono::steady_clock::time_point> s;
    for (int i = 0; i < 100 && !s; ++i) {
      s = r.shared->serving_since();
      if (!s) std::this_thread::sleep_for(20ms);
    }
    return s;
  };
  auto a = std::make_unique<replica>(redis.address(), "a", tune);
  ASSERT_TRUE(since_of(*a));
  std::this_thread::sleep_for(1500ms);
  const auto b_start = std::chrono::steady_clock::now();
  auto b = std::make_unique<replica>(redis.address(), "b", tune);
  auto sb = since_of(*b);
  ASSERT_TRUE(sb);
  EXPECT_LT(*sb, b_start - 1000ms) << "b did not learn that a served before it started";
  a.reset();
  // a gone, b still serving: no gap.
  std::this_thread::sleep_for(2500ms);
  auto sb2 = b->shared->serving_since();
  ASSERT_TRUE(sb2);
  EXPECT_LT(*sb2, b_start - 1000ms);
  b.reset();
  // Every replica gone for longer than two lease periods (2 s here).
  std::this_thread::sleep_for(3000ms);
  const auto c_start = std::chrono::steady_clock::now();
  replica c(redis.address(), "c", tune);
  auto sc = since_of(c);
  ASSERT_TRUE(sc);
  EXPECT_GT(*sc, c_start - 500ms) << "the service's start survived a gap with no replica";
}

// A checkpoint registered through one replica is in every replica's catalog (their listeners not
// called: the standbys are prewarmed once), loads into a new replica, and a removal travels too.
TEST(SharedStateRedis, CheckpointsAreInEveryReplicasCatalog) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  replica a(redis.address(), "a"), b(redis.address(), "b");
  auto body = checkpoint::encode(make_reg("train", 3, "n1"));
  auto reg = checkpoint::decode_registration(body);
  ASSERT_TRUE(reg);
  auto done = a.cat.register_checkpoint(std::move(*reg), "n1");
  ASSERT_TRUE(done);
  a.shared->checkpoint_registered("train@3", body, "n1");
  ASSERT_TRUE(eventually([&] { return b.cat.latest("train").has_value(); }));
  EXPECT_EQ(b.cat.latest("train")->manifest, done->rec.manifest);
  EXPECT_TRUE(b.cat.manifest("train@3"));
  EXPECT_EQ(a.told, std::vector<std::string>{"train@3"});
  EXPECT_TRUE(b.told.empty());

  replica c(redis.address(), "c");
  ASSERT_TRUE(c.cat.latest("train"));
  EXPECT_EQ(c.cat.latest("train")->step, 3u);
  EXPECT_TRUE(c.told.empty());

  ASSERT_TRUE(a.cat.remove("train@3"));
  a.shared->checkpoint_removed("train@3");
  EXPECT_TRUE(eventually([&] { return !b.cat.latest("train") && !c.cat.latest("train"); }));
  replica d(redis.address(), "d");
  EXPECT_FALSE(d.cat.latest("train"));
}

// An entry in a format this release does not read (a newer replica's) is skipped and counted;
// one of its own format is applied.
TEST(SharedStateRedis, EntriesOfAnotherFormatAreSkipped) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  replica a(redis.address(), "a");
  redis_options o;
  o.address = redis.address();
  redis_conn c(o);
  std::string body =
      R"({"id":"pw-9","summary":{},"nodes":[{"node":"n1","role":"target","orders":[]}]})";
  ASSERT_TRUE(c.command({"XADD", "shoal:log", "*", "f", "2", "t", "pw", "r", "x", "m", body}));
  ASSERT_TRUE(c.command({"XADD", "shoal:log", "*", "f", "1", "t", "pw", "r", "x", "m",
                         R"({"id":"pw-8","summary":{},"nodes":[]})"}));
  ASSERT_TRUE(eventually([&] { return a.pw.progress("pw-8").has_value(); }));
  EXPECT_FALSE(a.pw.progress("pw-9"));
  EXPECT_NE(a.reg.expose().find("shoal_scheduler_log_foreign_entries_total 1"), std::string::npos);
}

TEST(SharedStateRedis, RingMembersAnnouncedToOneReplicaAreListedByEveryReplica) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server did not start (not installed?)";
  replica a(redis.address(), "a"), b(redis.address(), "b");
  origin_members at_a(1s, a.shared.get()), at_b(1s, b.shared.get());
  ASSERT_TRUE(at_a.announce("https://rp-0:5050").has_value());
  auto l = at_b.announce("https://rp-1:5050");
  ASSERT_TRUE(l.has_value()) << l.error().message;
  EXPECT_FALSE(l->stale);
  EXPECT_EQ(l->members, (std::vector<std::string>{"https://rp-0:5050", "https://rp-1:5050"}));
  EXPECT_EQ(at_a.list().members, l->members);
  // rp-0 silent past the TTL (Redis's clock): gone from both.
  std::this_thread::sleep_for(1200ms);
  ASSERT_TRUE(at_b.announce("https://rp-1:5050").has_value());
  EXPECT_EQ(at_a.list().members, std::vector<std::string>{"https://rp-1:5050"});
  // The set is bounded in Redis too.
  auto r = a.shared->origins("https://rp-9:5050", 10s, 1);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(r->full);
}

}  // namespace
}  // namespace shoal::scheduler

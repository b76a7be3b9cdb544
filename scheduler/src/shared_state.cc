#include "scheduler/shared_state.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <charconv>

#include "common/digest.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "common/json_text.h"
#include "scheduler/ingest.h"
#include "shared_state_scripts.h"

namespace shoal::scheduler {

namespace {

using std::chrono::milliseconds;

// The SHA-1 Redis names a script by (EVALSHA).
std::string script_sha(const char* script) {
  std::uint8_t md[SHA_DIGEST_LENGTH];
  std::string_view s(script);
  SHA1(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  return to_hex(std::span<const std::uint8_t>(md, sizeof md));
}

std::string random_hex(std::size_t bytes) {
  std::vector<std::uint8_t> b(bytes);
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) return "0000000000000000";
  return to_hex(b);
}

}  // namespace

std::optional<log_id> log_id::parse(std::string_view s) {
  auto dash = s.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  log_id id;
  auto a = s.substr(0, dash), b = s.substr(dash + 1);
  auto [e1, c1] = std::from_chars(a.data(), a.data() + a.size(), id.ms);
  auto [e2, c2] = std::from_chars(b.data(), b.data() + b.size(), id.seq);
  if (c1 != std::errc() || c2 != std::errc() || e1 != a.data() + a.size() ||
      e2 != b.data() + b.size())
    return std::nullopt;
  return id;
}

std::string log_id::str() const { return std::to_string(ms) + "-" + std::to_string(seq); }

shared_state::shared_state(shared_state_options opts, cluster_index& index, tracker& trk,
                           metrics::registry& reg)
    : opts_(std::move(opts)),
      index_(index),
      trk_(trk),
      pool_(opts_.redis),
      sha_heartbeat_(script_sha(scripts::heartbeat)),
      sha_renew_(script_sha(scripts::renew)),
      sha_expire_(script_sha(scripts::expire)),
      sha_origins_(script_sha(scripts::origins)),
      stale_("not connected to Redis yet") {
  stale_gauge_ = &reg.gauge("shoal_scheduler_shared_state_stale",
                            "1 while Redis is unreachable and answers come from this replica's "
                            "own view (marked Shoal-Stale).")
                      .with({});
  lease_gauge_ =
      &reg.gauge("shoal_scheduler_lease_held", "1 while this replica holds the Redis lease.")
           .with({});
  replicas_gauge_ = &reg.gauge("shoal_scheduler_redis_replicas",
                               "Replicas the Redis primary reported connected at the last look "
                               "(ROLE, every second); -1 while unknown.")
                         .with({});
  replicas_gauge_->set(-1);
  errors_ = &reg.counter("shoal_scheduler_redis_errors_total",
                         "Redis calls that failed (unreachable, timed out, refused).")
                 .with({});
  unreplicated_ = &reg.counter("shoal_scheduler_redis_unreplicated_writes_total",
                               "Heartbeats answered before WAIT saw them on redis.wait_replicas "
                               "Redis replicas (a failover may lose them; nodes then resync).")
                       .with({});
  announces_dropped_ = &reg.counter("shoal_scheduler_announces_unshared_total",
                                    "Announces not shared with the other replicas (queue full or "
                                    "Redis unreachable).")
                            .with({});
  applied_total_ = &reg.counter("shoal_scheduler_log_applied_total",
                                "Entries of the shared log applied by the log reader, by type (a "
                                "heartbeat applied by the replica that received it is not "
                                "counted again).",
                                {"type"});
  reloads_ = &reg.counter("shoal_scheduler_state_reloads_total",
                          "Full loads of the shared state from Redis, by reason.", {"reason"});
  foreign_entries_ = &reg.counter("shoal_scheduler_log_foreign_entries_total",
                                  "Entries of the shared log in a format this replica does not "
                                  "read (written by a newer release), skipped.")
                          .with({});
  heartbeats_waited_ =
      &reg.counter("shoal_scheduler_heartbeats_waited_total",
                   "Heartbeats answered after waiting for this replica's log reader (the node's "
                   "previous heartbeat went to another replica and was not applied here yet); "
                   "the others are applied at once.")
           .with({});
  stale_gauge_->set(1);
}

shared_state::~shared_state() { stop(); }

void shared_state::start() {
  reader_ = std::thread([this] {
    name_this_thread("redis-log");
    reader_loop();
  });
  upkeep_ = std::thread([this] {
    name_this_thread("redis-upkeep");
    upkeep_loop();
  });
  // Answer with the cluster's epoch and what Redis holds from the first request: wait (boundedly)
  // for the first load. Redis unreachable: start stale, the reader keeps trying.
  using steady = std::chrono::steady_clock;
  const auto t0 = steady::now();
  const auto give_up = t0 + opts_.redis.connect_timeout * 2 + opts_.redis.command_timeout * 4;
  const auto load_limit = t0 + opts_.load_wait;
  auto next_log = t0 + std::chrono::seconds(5);
  std::unique_lock lk(mu_);
  while (!loaded_once_ && !stop_) {
    applied_cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return loaded_once_; });
    if (loaded_once_) break;
    const auto now = steady::now();
    if (!loading_.load()) {
      if (now >= give_up) break;
      continue;
    }
    if (now >= load_limit) break;
    if (now >= next_log) {
      next_log = now + std::chrono::seconds(5);
      log::info(
          "loading the shared state from redis before answering",
          log::kv("nodes", load_done_.load()), log::kv("of", load_total_.load()),
          log::kv("seconds", std::chrono::duration_cast<std::chrono::seconds>(now - t0).count()));
    }
  }
  if (!loaded_once_) {
    log::warn("redis not reached at start: answering from this replica alone",
              log::kv("error", stale_));
  }
}

void shared_state::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  applied_cv_.notify_all();
  reader_cv_.notify_all();
  upkeep_cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  if (upkeep_.joinable()) upkeep_.join();
}

bool shared_state::leader() const {
  std::lock_guard lk(mu_);
  return std::chrono::steady_clock::now() < leader_until_;
}

std::optional<std::chrono::steady_clock::time_point> shared_state::serving_since() const {
  std::lock_guard lk(mu_);
  return serving_since_;
}

void shared_state::catch_up() {
  {
    std::lock_guard lk(mu_);
    if (!stale_.empty()) return;
  }
  auto c = pool_.get();
  auto r = c->command({"XREVRANGE", opts_.prefix + "log", "+", "-", "COUNT", "1"});
  if (!r || r->type != redis_reply::kind::array || r->elements.empty() ||
      r->elements[0].elements.empty())
    return;
  if (auto last = log_id::parse(r->elements[0].elements[0].str)) wait_applied(*last);
}

std::string shared_state::stale_reason() const {
  std::lock_guard lk(mu_);
  return stale_;
}

void shared_state::set_stale(std::string why) {
  errors_->inc();
  std::lock_guard lk(mu_);
  if (stale_.empty())
    log::warn("redis unreachable: answering from this replica's view", log::kv("error", why));
  stale_ = std::move(why);
  stale_gauge_->set(1);
}

void shared_state::set_fresh() {
  std::lock_guard lk(mu_);
  if (!stale_.empty()) log::info("redis reachable: shared state is current");
  stale_.clear();
  stale_gauge_->set(0);
}

result<redis_reply> shared_state::eval(redis_conn& c, const char* script, const std::string& sha,
                                       const std::vector<std::string>& args) {
  std::vector<std::string> cmd{"EVALSHA", sha};
  cmd.insert(cmd.end(), args.begin(), args.end());
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto r = c.command(cmd);
    if (!r) return r;
    if (r->is_error() && r->str.starts_with("NOSCRIPT")) {
      // Not loaded on this primary yet (a new one after a failover, or a restart): load it.
      auto l = c.command({"SCRIPT", "LOAD", script});
      if (!l) return fail(l.error());
      if (l->is_error()) return fail(errc::upstream_error, "redis SCRIPT LOAD: " + l->str);
      continue;
    }
    if (r->is_error()) return fail(errc::upstream_error, "redis script: " + r->str);
    return r;
  }
  return fail(errc::upstream_error, "redis: the script did not load");
}

result<shared_state::origins_answer> shared_state::origins(const std::string& url,
                                                           std::chrono::milliseconds ttl,
                                                           std::size_t cap) {
  {
    // As heartbeats: while the reader has not reached Redis, no request pays a connect timeout
    // (registry-proxy replicas announce every few seconds; docs/ha.md "Degraded, not down").
    std::lock_guard lk(mu_);
    if (!stale_.empty()) return fail(errc::unavailable, "redis: " + stale_);
  }
  auto c = pool_.get();
  auto r =
      eval(*c, scripts::origins, sha_origins_,
           {"1", opts_.prefix + "origins", url, std::to_string(ttl.count()), std::to_string(cap)});
  if (!r) return fail(r.error());
  if (r->elements.size() != 2)
    return fail(errc::protocol_error, "redis: unexpected reply to the origins script");
  origins_answer out;
  out.full = r->elements[0].integer != 0;
  for (const auto& e : r->elements[1].elements) out.members.push_back(e.str);
  return out;
}

shared_state::heartbeat_result shared_state::heartbeat(const heartbeat::message& m) {
  heartbeat_result res;
  res.out = index_.refused(m);
  if (res.out.refused != 0) return res;
  bool down;
  {
    std::lock_guard lk(mu_);
    down = !stale_.empty();
  }
  // While the reader has not reached Redis, do not make every heartbeat pay a connect timeout.
  if (!down) {
    // The netsetup document goes apart (the script keeps it once per node; scripts.h): the
    // log entry is the message without it (the script's "=", ARGV[10] and the entry's ns, says
    // whether it was unchanged), the record's inventory that without the objects either.
    std::string entry = heartbeat::encode(m, {.netsetup = false});
    std::vector<std::string> args{"6",
                                  opts_.prefix + "n:" + m.node,
                                  opts_.prefix + "h:" + m.node,
                                  opts_.prefix + "log",
                                  opts_.prefix + "nodes",
                                  opts_.prefix + "epoch",
                                  opts_.prefix + "seen",
                                  m.node,
                                  m.epoch,
                                  std::to_string(m.seq),
                                  m.full ? "1" : "0",
                                  m.bt_port != 0 ? m.ip + ":" + std::to_string(m.bt_port) : "",
                                  heartbeat::encode(m, {.netsetup = false, .holdings = false}),
                                  std::move(entry),
                                  std::to_string(opts_.log_max_entries),
                                  opts_.replica_id,
                                  m.netsetup_unchanged ? std::string("=") : m.netsetup,
                                  std::to_string(m.objects.size())};
    args.reserve(args.size() + 2 * m.objects.size() + m.removed.size() + 1);
    for (const auto& o : m.objects) {
      args.push_back(o.id.str());
      args.push_back(std::to_string(o.size) + " " + o.kind + " " + o.info_hash);
    }
    args.push_back(std::to_string(m.removed.size()));
    for (const auto& d : m.removed) args.push_back(d.str());
    auto c = pool_.get();
    bool reused = c->connected();
    auto r = eval(*c, scripts::heartbeat, sha_heartbeat_, args);
    // An idle pooled connection may lead to a primary that died or was demoted since: once more
    // on a fresh one. Should the first attempt have been applied after all, the second is a gap
    // (the same seq again) and the node resends its full list: nothing is lost.
    if (!r && reused && !c->connected()) r = eval(*c, scripts::heartbeat, sha_heartbeat_, args);
    if (r && r->elements.size() == 1 && r->elements[0].str == "noepoch") {
      (void)c->command({"SET", opts_.prefix + "epoch", random_hex(8), "NX"});
      r = eval(*c, scripts::heartbeat, sha_heartbeat_, args);
    }
    if (r && r->elements.size() == 4) {
      const auto& verdict = r->elements[0].str;
      auto id = log_id::parse(r->elements[1].str).value_or(log_id{});
      res.epoch = r->elements[2].str;
      res.out.full = verdict == "full";
      res.out.resync = verdict != "full" && verdict != "ok";
      if (res.out.resync) res.out.resync_reason = verdict;
      replicated(*c);
      // The node's previous entry is the last applied here for it (this replica answered it,
      // or the reader passed it): apply this one now, in order, instead of waiting for the
      // reader, which then skips it. Otherwise (the node came from another replica whose entry
      // is not read yet, a load under way) the reader applies it in the log's order.
      const auto prev = log_id::parse(r->elements[3].str);
      std::unique_lock ap(apply_mu_);
      bool direct = false;
      {
        std::lock_guard lk(mu_);
        auto it = node_log_.find(m.node);
        // The reader was quicker (it reads the entry as soon as Redis has it): applied.
        if (it != node_log_.end() && !(it->second < id)) return res;
        direct = !loading_ && stale_.empty() &&
                 (it == node_log_.end() ? !prev : (prev && *prev == it->second));
        if (direct) node_log_[m.node] = id;
      }
      if (direct) {
        apply_heartbeat(m, verdict);
        return res;
      }
      ap.unlock();
      heartbeats_waited_->inc();
      wait_applied(id);
      return res;
    }
    set_stale(r ? "unexpected reply to the heartbeat script" : r.error().message);
  }
  res.out = ingest_heartbeat(index_, trk_, m);
  res.stale = true;
  return res;
}

void shared_state::replicated(redis_conn& c) {
  if (opts_.wait_replicas <= 0) return;
  const int known = redis_replicas_.load(std::memory_order_relaxed);
  if (known >= 0 && known < opts_.wait_replicas) {
    unreplicated_->inc();
    return;
  }
  auto w = c.command(
      {"WAIT", std::to_string(opts_.wait_replicas), std::to_string(opts_.wait_timeout.count())});
  if (!w || w->integer < opts_.wait_replicas) unreplicated_->inc();
}

void shared_state::check_replicas(redis_conn& c) {
  int n = -1;
  auto r = c.command({"ROLE"});
  // A primary answers ["master", offset, [[ip, port, offset], ...]].
  if (r && r->type == redis_reply::kind::array && r->elements.size() >= 3 &&
      r->elements[0].str == "master" && r->elements[2].type == redis_reply::kind::array) {
    n = static_cast<int>(r->elements[2].elements.size());
  }
  const int was = redis_replicas_.exchange(n, std::memory_order_relaxed);
  if (was != n) {
    replicas_gauge_->set(n);
    if (n >= 0 && n < opts_.wait_replicas) {
      log::warn(
          "redis primary has fewer replicas than redis.wait_replicas: heartbeats are "
          "answered without WAIT and counted unreplicated",
          log::kv("replicas", n), log::kv("wait_replicas", opts_.wait_replicas));
    } else if (was >= 0 && was < opts_.wait_replicas) {
      log::info("redis primary has its replicas again", log::kv("replicas", n));
    }
  }
}

void shared_state::settle(redis_conn& c, const log_id& id) {
  replicated(c);
  wait_applied(id);
}

void shared_state::wait_applied(const log_id& id) {
  std::unique_lock lk(mu_);
  if (!(applied_ < id)) return;
  hurry_ = true;
  reader_cv_.notify_one();
  applied_cv_.wait_for(lk, opts_.apply_wait, [&] { return stop_ || !(applied_ < id); });
}

void shared_state::attach(prewarm_manager& p) {
  prewarm_ = &p;
  p.set_sharer([this](const std::string& id, const std::vector<planned_node>& nodes,
                      const nlohmann::json& summary) { return share_prewarm(id, nodes, summary); });
}

void shared_state::attach(job_registry& j) {
  jobs_ = &j;
  j.set_sharer([this](const std::string& id) {
    std::lock_guard lk(mu_);
    if (jobs_changed_.size() >= opts_.announce_queue) {
      announces_dropped_->inc();
      return;
    }
    jobs_changed_.push_back(id);
    upkeep_cv_.notify_one();
  });
}

void shared_state::attach(placer& p) {
  placer_ = &p;
  p.set_reservation_sharer(
      [this](const std::string& id, const std::vector<std::string>& nodes, std::uint32_t gpus,
             std::chrono::milliseconds ttl) {
        std::string list;
        for (const auto& n : nodes) list += (list.empty() ? "" : ",") + n;
        auto c = pool_.get();
        auto r = c->command({"XADD",
                             opts_.prefix + "log",
                             "MAXLEN",
                             "~",
                             std::to_string(opts_.log_max_entries),
                             "*",
                             "f",
                             shared_log_format,
                             "t",
                             "rs",
                             "r",
                             opts_.replica_id,
                             "id",
                             id,
                             "nodes",
                             list,
                             "gpus",
                             std::to_string(gpus),
                             "ttl",
                             std::to_string(ttl.count())});
        if (!r || r->is_error()) set_stale(r ? "redis XADD: " + r->str : r.error().message);
      },
      random_hex(4) + "-");
}

void shared_state::attach(checkpoint_catalog& c) { checkpoints_ = &c; }

void shared_state::checkpoint_registered(const std::string& key, const std::string& body,
                                         const std::string& caller) {
  auto c = pool_.get();
  auto r = c->pipeline(
      {{"SET", opts_.prefix + "ck:" + key, caller + "\n" + body, "PX",
        std::to_string(opts_.job_keep.count())},
       {"ZADD", opts_.prefix + "cks",
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()),
        key},
       {"XADD", opts_.prefix + "log", "MAXLEN", "~", std::to_string(opts_.log_max_entries), "*",
        "f", shared_log_format, "t", "ck", "r", opts_.replica_id, "key", key}});
  if (!r || r->back().is_error()) {
    set_stale(r ? "redis: " + r->back().str : r.error().message);
    log::warn("checkpoint not shared with the other replicas", log::kv("checkpoint", key));
    return;
  }
  replicated(*c);
}

void shared_state::checkpoint_removed(const std::string& key) {
  auto c = pool_.get();
  auto r = c->pipeline(
      {{"DEL", opts_.prefix + "ck:" + key},
       {"ZREM", opts_.prefix + "cks", key},
       {"XADD", opts_.prefix + "log", "MAXLEN", "~", std::to_string(opts_.log_max_entries), "*",
        "f", shared_log_format, "t", "ckdel", "r", opts_.replica_id, "key", key}});
  if (!r) set_stale(r.error().message);
}

static std::string encode_prewarm_entry(const std::string& id,
                                        const std::vector<planned_node>& nodes,
                                        const nlohmann::json& summary) {
  nlohmann::json j{{"id", id}, {"summary", summary}, {"nodes", nlohmann::json::array()}};
  for (const auto& n : nodes) {
    heartbeat::reply r;
    r.orders = n.orders;  // the orders in their one wire format (common/heartbeat.h)
    auto rj = nlohmann::json::parse(heartbeat::encode(r));
    j["nodes"].push_back({{"node", n.node}, {"role", n.role}, {"orders", rj["orders"]}});
  }
  return json_text(j);
}

status shared_state::share_prewarm(const std::string& id, const std::vector<planned_node>& nodes,
                                   const nlohmann::json& summary) {
  bool down;
  {
    std::lock_guard lk(mu_);
    down = !stale_.empty();
  }
  if (!down) {
    auto body = encode_prewarm_entry(id, nodes, summary);
    // Kept as a key too (a replica started after the log was trimmed loads it), then logged.
    std::vector<std::vector<std::string>> cmds{
        {"SET", opts_.prefix + "pw:" + id, body, "PX", std::to_string(opts_.prewarm_keep.count())},
        {"SADD", opts_.prefix + "pws", id},
        {"XADD", opts_.prefix + "log", "MAXLEN", "~", std::to_string(opts_.log_max_entries), "*",
         "f", shared_log_format, "t", "pw", "r", opts_.replica_id, "m", body}};
    auto c = pool_.get();
    bool reused = c->connected();
    auto r = c->pipeline(cmds);
    // Once more on a fresh connection (a prewarm logged twice is registered once: same id).
    if (!r && reused && !c->connected()) r = c->pipeline(cmds);
    if (r && r->size() == 3 && (*r)[2].type == redis_reply::kind::string) {
      settle(*c, log_id::parse((*r)[2].str).value_or(log_id{}));
      return {};
    }
    set_stale(r ? "redis: " + (r->empty() ? std::string() : r->back().str) : r.error().message);
  }
  return prewarm_->apply_create(id, nodes, summary);
}

void shared_state::announced(const announce_request& a) {
  std::lock_guard lk(mu_);
  if (announces_.size() >= opts_.announce_queue || !stale_.empty()) {
    announces_dropped_->inc();
    return;
  }
  announces_.push_back(a);
  upkeep_cv_.notify_one();
}

void shared_state::publish_jobs(redis_conn& c) {
  std::deque<std::string> ids;
  {
    std::lock_guard lk(mu_);
    ids.swap(jobs_changed_);
  }
  if (ids.empty() || jobs_ == nullptr) return;
  std::vector<std::vector<std::string>> cmds;
  const auto log = opts_.prefix + "log", maxlen = std::to_string(opts_.log_max_entries);
  for (const auto& id : ids) {
    auto snap = jobs_->snapshot(id);
    if (snap) {
      cmds.push_back(
          {"SET", opts_.prefix + "job:" + id, *snap, "PX", std::to_string(opts_.job_keep.count())});
      cmds.push_back({"SADD", opts_.prefix + "jobs", id});
    } else {
      cmds.push_back({"DEL", opts_.prefix + "job:" + id});
      cmds.push_back({"SREM", opts_.prefix + "jobs", id});
    }
    cmds.push_back({"XADD", log, "MAXLEN", "~", maxlen, "*", "f", shared_log_format, "t", "job",
                    "r", opts_.replica_id, "id", id, "m", snap.value_or("")});
  }
  if (!c.pipeline(cmds)) {
    announces_dropped_->inc(static_cast<double>(ids.size()));
    log::warn("jobs not shared: redis unreachable", log::kv("jobs", ids.size()));
    return;
  }
  replicated(c);
}

}  // namespace shoal::scheduler

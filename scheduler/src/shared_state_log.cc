// shared_state: the log reader (loads, epochs, applying entries) and the upkeep thread (announces
// published, the lease, record expiry). shared_state.cc has the request side.
#include <openssl/rand.h>

#include <charconv>

#include "common/checkpoint.h"
#include "common/digest.h"
#include "common/log.h"
#include "common/json_text.h"
#include "scheduler/ingest.h"
#include "scheduler/shared_state.h"
#include "shared_state_scripts.h"

namespace shoal::scheduler {

namespace {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

const std::string* field_ptr(const redis_reply& flat, std::string_view field) {
  for (std::size_t i = 0; i + 1 < flat.elements.size(); i += 2) {
    if (flat.elements[i].str == field) return &flat.elements[i + 1].str;
  }
  return nullptr;
}

const std::string& field_of(const redis_reply& flat, std::string_view field) {
  static const std::string none;
  const auto* v = field_ptr(flat, field);
  return v != nullptr ? *v : none;
}

std::uint64_t to_u64(std::string_view s) {
  std::uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

std::string new_epoch() {
  std::uint8_t b[8];
  if (RAND_bytes(b, sizeof b) != 1) return {};
  return to_hex(std::span<const std::uint8_t>(b, sizeof b));
}

// Redis's clock in milliseconds (ages of records are measured on it).
result<std::uint64_t> redis_now_ms(redis_conn& c) {
  auto t = c.command({"TIME"});
  if (!t) return fail(t.error());
  if (t->elements.size() != 2) return fail(errc::protocol_error, "redis TIME: unexpected reply");
  return to_u64(t->elements[0].str) * 1000 + to_u64(t->elements[1].str) / 1000;
}

// An announce from a log entry; nullopt when the entry is malformed.
std::optional<announce_request> announce_of(const redis_reply& f) {
  announce_request a;
  if (!parse_info_hash(field_of(f, "ih"), a.info_hash)) return std::nullopt;
  a.ip = field_of(f, "ip");
  auto port = to_u64(field_of(f, "port"));
  if (a.ip.empty() || port == 0 || port > 65535) return std::nullopt;
  a.port = static_cast<std::uint16_t>(port);
  a.left = to_u64(field_of(f, "left"));
  switch (to_u64(field_of(f, "ev"))) {
    case 1:
      a.event = announce_request::event_t::started;
      break;
    case 2:
      a.event = announce_request::event_t::completed;
      break;
    case 3:
      a.event = announce_request::event_t::stopped;
      break;
    default:
      break;
  }
  a.node = field_of(f, "node");
  a.zone = field_of(f, "zone");
  a.rack = field_of(f, "rack");
  a.origin = field_of(f, "o") == "1";
  // The announcer's peer id (tracker: a stale "stopped" is told by it); absent in the entries
  // of replicas before it, which leaves it unknown.
  if (!parse_info_hash(field_of(f, "pid"), a.peer_id)) a.peer_id = {};
  return a;
}

std::vector<std::string> announce_entry(const announce_request& a, const std::string& log,
                                        std::size_t maxlen, const std::string& me) {
  const char* ev = "0";
  if (a.event == announce_request::event_t::started) ev = "1";
  if (a.event == announce_request::event_t::completed) ev = "2";
  if (a.event == announce_request::event_t::stopped) ev = "3";
  return {"XADD",
          log,
          "MAXLEN",
          "~",
          std::to_string(maxlen),
          "*",
          "f",
          shared_log_format,
          "t",
          "an",
          "r",
          me,
          "ih",
          to_hex(a.info_hash),
          "ip",
          a.ip,
          "port",
          std::to_string(a.port),
          "left",
          std::to_string(a.left),
          "ev",
          ev,
          "node",
          a.node,
          "zone",
          a.zone,
          "rack",
          a.rack,
          "o",
          a.origin ? "1" : "0",
          "pid",
          to_hex(a.peer_id)};
}

}  // namespace

status shared_state::sync_epoch(redis_conn& c, std::string& reload_why) {
  auto key = opts_.prefix + "epoch";
  auto g = c.command({"GET", key});
  if (!g) return fail(g.error());
  if (g->is_nil()) {
    auto e = new_epoch();
    auto s = c.command({"SET", key, e, "NX"});
    if (!s) return fail(s.error());
    g = c.command({"GET", key});
    if (!g) return fail(g.error());
    if (g->str == e)
      log::info("new cluster epoch in redis: every node resyncs", log::kv("epoch", e));
  }
  if (g->is_error() || g->str.empty())
    return fail(errc::protocol_error, "redis GET epoch: " + g->str);
  if (g->str != index_.epoch()) {
    index_.set_epoch(g->str);
    if (reload_why.empty()) reload_why = "epoch";
  }
  return {};
}

status shared_state::check_log(redis_conn& c, std::string& reload_why) {
  auto info = c.command({"XINFO", "STREAM", opts_.prefix + "log"});
  if (!info) return fail(info.error());
  std::lock_guard lk(mu_);
  if (info->is_error()) {  // no log at all (nothing written yet, or Redis lost it)
    applied_ = {};
    return {};
  }
  auto last = log_id::parse(field_of(*info, "last-generated-id")).value_or(log_id{});
  auto deleted = log_id::parse(field_of(*info, "max-deleted-entry-id")).value_or(log_id{});
  if (applied_ != log_id{} && applied_ < deleted && reload_why.empty()) reload_why = "gap";
  if (last < applied_) {
    log::warn("redis log is behind what this replica read (a failover lost entries): reading on",
              log::kv("read", applied_.str()), log::kv("log_end", last.str()));
    applied_ = last;
  }
  return {};
}

status shared_state::load_nodes(redis_conn& c, std::unordered_map<std::string, log_id>& loaded) {
  auto members = c.command({"SMEMBERS", opts_.prefix + "nodes"});
  if (!members) return fail(members.error());
  auto now = redis_now_ms(c);
  if (!now) return fail(now.error());
  heartbeat::decode_limits lim;
  lim.max_objects = opts_.max_objects_per_node;
  constexpr std::size_t batch = 64;
  load_total_ = members->elements.size();
  load_done_ = 0;
  for (std::size_t i = 0; i < members->elements.size(); i += batch) {
    load_done_ = i;
    std::vector<std::vector<std::string>> cmds;
    std::size_t end = std::min(members->elements.size(), i + batch);
    for (std::size_t k = i; k < end; ++k) {
      cmds.push_back({"HGETALL", opts_.prefix + "n:" + members->elements[k].str});
      cmds.push_back({"HGETALL", opts_.prefix + "h:" + members->elements[k].str});
    }
    auto r = c.pipeline(cmds);
    if (!r) return fail(r.error());
    for (std::size_t k = 0; k + 1 < r->size(); k += 2) {
      const auto& rec = (*r)[k];
      auto m = heartbeat::decode(field_of(rec, "inv"), lim);
      if (!m) continue;  // expired meanwhile, or not ours
      // The netsetup document is kept apart (scripts.h); a record of an older replica has it in
      // its inventory.
      if (const auto* ns = field_ptr(rec, "ns")) m->netsetup = *ns;
      m->full = true;
      m->seq = to_u64(field_of(rec, "seq"));
      const auto& held = (*r)[k + 1].elements;
      for (std::size_t h = 0; h + 1 < held.size(); h += 2) {
        auto d = digest::parse(held[h].str);
        if (!d) continue;
        heartbeat::held_object o;
        o.id = *d;
        const auto& v = held[h + 1].str;  // "size kind info_hash"
        auto sp1 = v.find(' ');
        auto sp2 = sp1 == std::string::npos ? sp1 : v.find(' ', sp1 + 1);
        if (sp2 == std::string::npos) continue;
        o.size = to_u64(std::string_view(v).substr(0, sp1));
        o.kind = v.substr(sp1 + 1, sp2 - sp1 - 1);
        o.info_hash = v.substr(sp2 + 1);
        m->objects.push_back(std::move(o));
      }
      auto seen = to_u64(field_of(rec, "seen"));
      apply_decision d{"full", milliseconds(*now > seen ? *now - seen : 0)};
      (void)ingest_heartbeat(index_, trk_, *m, &d);
      loaded[m->node] = log_id::parse(field_of(rec, "log")).value_or(log_id{});
    }
  }
  return {};
}

status shared_state::load_kept(redis_conn& c, std::size_t& prewarms, std::size_t& jobs) {
  struct kind {
    const char* set;
    const char* key;
    std::size_t* count;
  };
  for (const kind& k : {kind{"pws", "pw:", &prewarms}, kind{"jobs", "job:", &jobs}}) {
    auto ids = c.command({"SMEMBERS", opts_.prefix + k.set});
    if (!ids) return fail(ids.error());
    for (std::size_t i = 0; i < ids->elements.size(); i += 256) {
      std::vector<std::string> cmd{"MGET"};
      std::size_t end = std::min(ids->elements.size(), i + 256);
      for (std::size_t n = i; n < end; ++n)
        cmd.push_back(opts_.prefix + k.key + ids->elements[n].str);
      auto vals = c.command(cmd);
      if (!vals) return fail(vals.error());
      for (std::size_t n = 0; n < vals->elements.size(); ++n) {
        const auto& v = vals->elements[n];
        if (v.is_nil()) {  // expired: forget it in the set too
          (void)c.command({"SREM", opts_.prefix + k.set, ids->elements[i + n].str});
          continue;
        }
        if (k.count == &prewarms) {
          apply_prewarm_entry(v.str);
        } else if (jobs_ != nullptr) {
          if (auto s = jobs_->put(v.str); !s) continue;
        }
        ++*k.count;
      }
    }
  }
  return {};
}

status shared_state::reload(redis_conn& c, const std::string& why) {
  auto t0 = steady::now();
  struct under_way {
    std::atomic<bool>& flag;
    explicit under_way(std::atomic<bool>& f) : flag(f) { flag = true; }
    ~under_way() { flag = false; }
    under_way(const under_way&) = delete;
    under_way& operator=(const under_way&) = delete;
  } loading(loading_);
  auto info = c.command({"XINFO", "STREAM", opts_.prefix + "log"});
  if (!info) return fail(info.error());
  log_id last = info->is_error()
                    ? log_id{}
                    : log_id::parse(field_of(*info, "last-generated-id")).value_or(log_id{});
  std::unordered_map<std::string, log_id> loaded;
  if (auto s = load_nodes(c, loaded); !s) return s;
  std::size_t announces = 0, prewarms = 0, jobs = 0;
  if (auto s = load_kept(c, prewarms, jobs); !s) return s;
  std::size_t checkpoints = 0;
  if (auto s = load_checkpoints(c, checkpoints); !s) return s;
  // The announces of the last peer_timeout (peers announce at least this often).
  if (last != log_id{}) {
    auto peer_ms = static_cast<std::uint64_t>(opts_.peer_timeout.count());
    log_id since{last.ms > peer_ms ? last.ms - peer_ms : 0, 0};
    std::string from = since.str();
    for (int pages = 0; pages < 1000 && !stop_; ++pages) {
      auto r = c.command({"XRANGE", opts_.prefix + "log", from, last.str(), "COUNT", "1000"});
      if (!r) return fail(r.error());
      if (r->elements.empty()) break;
      for (const auto& e : r->elements) {
        if (e.elements.size() != 2) continue;
        const auto& type = field_of(e.elements[1], "t");
        auto at = log_id::parse(e.elements[0].str).value_or(log_id{});
        if (type == "rs")
          apply_reservation_entry(e.elements[1], last.ms > at.ms ? last.ms - at.ms : 0);
        if (type == "an" && !(at < since)) {
          if (auto a = announce_of(e.elements[1])) {
            trk_.record(*a);
            ++announces;
          }
        }
      }
      if (r->elements.size() < 1000) break;
      from = "(" + r->elements.back().elements[0].str;
    }
  }
  std::size_t nodes = loaded.size();
  {
    std::lock_guard lk(mu_);
    applied_ = last;
    node_log_ = std::move(loaded);
    loaded_once_ = true;
    // Current from here, in the same step that lets start() return: a heartbeat right after
    // start() goes through Redis, never through the stale path (which logs nothing, so the other
    // replicas would not learn of it).
    if (!stale_.empty()) log::info("redis reachable: shared state is current");
    stale_.clear();
    stale_gauge_->set(0);
  }
  applied_cv_.notify_all();
  reloads_->with({why}).inc();
  log::info("shared state loaded from redis", log::kv("reason", why), log::kv("nodes", nodes),
            log::kv("announces", announces), log::kv("prewarms", prewarms), log::kv("jobs", jobs),
            log::kv("checkpoints", checkpoints),
            log::kv("ms", std::chrono::duration_cast<milliseconds>(steady::now() - t0).count()));
  return {};
}

bool shared_state::apply_heartbeat_entry(const std::string& id, const std::string& verdict,
                                         const std::string& node, const std::string& body,
                                         const std::string* netsetup) {
  auto lid = log_id::parse(id).value_or(log_id{});
  std::lock_guard ap(apply_mu_);
  // Applied already (by the replica that received it, or in the record loaded): skipped without
  // decoding. Entries of older replicas name no node: decoded first.
  auto applied_here = [&](const std::string& n) {
    std::lock_guard lk(mu_);
    auto it = node_log_.find(n);
    if (it != node_log_.end() && !(it->second < lid)) return true;
    node_log_[n] = lid;
    return false;
  };
  if (!node.empty() && applied_here(node)) return false;
  heartbeat::decode_limits lim;
  lim.max_objects = opts_.max_objects_per_node;
  auto m = heartbeat::decode(body, lim);
  if (!m) {
    log::warn("shared log: heartbeat entry does not decode", log::kv("id", id),
              log::kv("error", m.error().message));
    return false;
  }
  if (node.empty() && applied_here(m->node)) return false;
  // The entry's netsetup document: "=" the node's previous one (applied here before this entry:
  // the log's order; the index keeps it, nothing copied), otherwise the document itself; none in
  // entries of older replicas, whose message has it.
  if (netsetup != nullptr && *netsetup == "=")
    m->netsetup_unchanged = true;
  else if (netsetup != nullptr)
    m->netsetup = *netsetup;
  apply_heartbeat(*m, verdict);
  return true;
}

void shared_state::apply_heartbeat(const heartbeat::message& m, const std::string& verdict) {
  apply_decision d{verdict, milliseconds(0)};
  (void)ingest_heartbeat(index_, trk_, m, &d);
  // The node's prewarm reports (the replica it talks to also hands it its orders), and the pods
  // it runs (jobs learned from them).
  if (prewarm_ != nullptr) (void)prewarm_->on_heartbeat(m.node, m.orders, m.schema);
  if (jobs_ != nullptr && m.pods_known) {
    auto fabric = m.labels.find("fabric");
    jobs_->observe_pods(m.node, fabric == m.labels.end() ? std::string() : fabric->second, m.pods);
  }
}

void shared_state::apply_prewarm_entry(const std::string& body) {
  if (prewarm_ == nullptr) return;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("id") || !j["id"].is_string() || !j.contains("nodes") ||
      !j["nodes"].is_array()) {
    log::warn("shared log: prewarm entry does not decode");
    return;
  }
  std::vector<planned_node> nodes;
  auto base = nlohmann::json::parse(heartbeat::encode(heartbeat::reply{}));
  for (const auto& n : j["nodes"]) {
    if (!n.is_object() || !n.contains("node") || !n["node"].is_string()) continue;
    planned_node p;
    p.node = n["node"].get<std::string>();
    if (n.contains("role") && n["role"].is_string()) p.role = n["role"].get<std::string>();
    base["orders"] = n.value("orders", nlohmann::json::array());
    auto r = heartbeat::decode_reply(json_text(base));
    if (!r) {
      log::warn("shared log: prewarm orders do not decode", log::kv("error", r.error().message));
      return;
    }
    p.orders = std::move(r->orders);
    nodes.push_back(std::move(p));
  }
  auto id = j["id"].get<std::string>();
  auto s =
      prewarm_->apply_create(id, std::move(nodes), j.value("summary", nlohmann::json::object()));
  if (!s && !s.error().is(errc::already_exists)) {
    log::warn("shared log: prewarm not registered", log::kv("id", id),
              log::kv("error", s.error().message));
  }
}

void shared_state::apply_job_entry(const redis_reply& f) {
  if (jobs_ == nullptr) return;
  const auto& body = field_of(f, "m");
  if (body.empty()) {
    jobs_->erase(field_of(f, "id"));
    return;
  }
  if (auto s = jobs_->put(body); !s)
    log::warn("shared log: job not applied", log::kv("error", s.error().message));
}

void shared_state::apply_reservation_entry(const redis_reply& f, std::uint64_t age_ms) {
  if (placer_ == nullptr) return;
  auto ttl = to_u64(field_of(f, "ttl"));
  auto gpus = to_u64(field_of(f, "gpus"));
  if (ttl <= age_ms || gpus == 0 || gpus > 1'000'000) return;
  std::vector<std::string> nodes;
  std::string_view list = field_of(f, "nodes");
  while (!list.empty()) {
    auto comma = list.find(',');
    nodes.emplace_back(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  placer_->add_reservation(field_of(f, "id"), nodes, static_cast<std::uint32_t>(gpus),
                           milliseconds(ttl - age_ms));
}

void shared_state::apply_checkpoint(const std::string& key, const std::string& kept) {
  if (checkpoints_ == nullptr) return;
  auto nl = kept.find('\n');
  if (nl == std::string::npos) return;
  auto reg = checkpoint::decode_registration(std::string_view(kept).substr(nl + 1));
  if (!reg) {
    log::warn("shared checkpoint does not decode", log::kv("checkpoint", key),
              log::kv("error", reg.error().message));
    return;
  }
  auto r = checkpoints_->register_checkpoint(std::move(*reg), kept.substr(0, nl), false);
  if (!r) {
    log::warn("shared checkpoint not registered", log::kv("checkpoint", key),
              log::kv("error", r.error().message));
  }
}

status shared_state::load_checkpoints(redis_conn& c, std::size_t& loaded) {
  if (checkpoints_ == nullptr) return {};
  // In registration order, so that the catalog's bounds drop what they dropped elsewhere.
  auto keys = c.command({"ZRANGE", opts_.prefix + "cks", "0", "-1"});
  if (!keys) return fail(keys.error());
  for (const auto& k : keys->elements) {
    auto v = c.command({"GET", opts_.prefix + "ck:" + k.str});
    if (!v) return fail(v.error());
    if (v->is_nil()) {
      (void)c.command({"ZREM", opts_.prefix + "cks", k.str});
      continue;
    }
    apply_checkpoint(k.str, v->str);
    ++loaded;
  }
  return {};
}

void shared_state::apply_entry(const redis_reply& e) {
  if (e.elements.size() != 2) return;
  const auto& f = e.elements[1];
  if (const auto& format = field_of(f, "f"); !format.empty() && format != shared_log_format) {
    foreign_entries_->inc();
    log::warn("shared log: entry in another format skipped (a newer replica?)",
              log::kv("format", format), log::kv("id", e.elements[0].str));
    return;
  }
  const auto& type = field_of(f, "t");
  if (type == "hb") {
    // Applied here already (received here, or in the record loaded): not counted.
    if (!apply_heartbeat_entry(e.elements[0].str, field_of(f, "v"), field_of(f, "n"),
                               field_of(f, "m"), field_ptr(f, "ns")))
      return;
  } else if (type == "an") {
    if (field_of(f, "r") == opts_.replica_id) return;  // answered (and recorded) here
    if (auto a = announce_of(f)) trk_.record(*a);
  } else if (type == "pw") {
    apply_prewarm_entry(field_of(f, "m"));
  } else if (type == "job") {
    if (field_of(f, "r") == opts_.replica_id) return;  // changed here
    apply_job_entry(f);
  } else if (type == "rs") {
    if (field_of(f, "r") == opts_.replica_id) return;  // reserved here
    apply_reservation_entry(f, 0);
  } else if (type == "ck" || type == "ckdel") {
    if (field_of(f, "r") == opts_.replica_id || checkpoints_ == nullptr) return;
    const auto& key = field_of(f, "key");
    if (type == "ckdel") {
      (void)checkpoints_->remove(key);
    } else {
      auto c = pool_.get();
      auto v = c->command({"GET", opts_.prefix + "ck:" + key});
      if (v && v->type == redis_reply::kind::string) apply_checkpoint(key, v->str);
    }
  } else {
    return;
  }
  applied_total_->with({type}).inc();
}

void shared_state::reader_loop() {
  redis_conn c(opts_.redis);
  std::string reload_why = "start";
  auto epoch_checked = steady::now();
  while (!stop_) {
    if (!c.connected() || !reload_why.empty()) {
      status s = sync_epoch(c, reload_why);
      if (s) s = check_log(c, reload_why);
      if (s && !reload_why.empty()) s = reload(c, reload_why);
      if (!s) {
        set_stale(s.error().message);
        c.close();
        std::unique_lock lk(mu_);
        applied_cv_.wait_for(lk, milliseconds(500), [&] { return stop_.load(); });
        continue;
      }
      reload_why.clear();
      set_fresh();
    }
    log_id from;
    {
      std::lock_guard lk(mu_);
      from = applied_;
    }
    c.set_command_timeout(opts_.redis.command_timeout + milliseconds(1000));
    auto r = c.command(
        {"XREAD", "COUNT", "256", "BLOCK", "1000", "STREAMS", opts_.prefix + "log", from.str()});
    if (!r || r->is_error()) {
      set_stale(r ? "redis XREAD: " + r->str : r.error().message);
      c.close();
      continue;
    }
    set_fresh();
    bool read_some = false;
    if (r->type == redis_reply::kind::array && !r->elements.empty() &&
        r->elements[0].elements.size() == 2) {
      for (const auto& e : r->elements[0].elements[1].elements) {
        apply_entry(e);
        auto id = log_id::parse(e.elements.empty() ? "" : e.elements[0].str);
        std::lock_guard lk(mu_);
        if (id && applied_ < *id) applied_ = *id;
        read_some = true;
      }
      applied_cv_.notify_all();
    }
    // Entries come in batches: one read (and one wake-up of this thread and of Redis) for every
    // read_batch rather than for every entry. Someone waiting for an entry cuts the wait short.
    if (read_some && opts_.read_batch.count() > 0) {
      std::unique_lock lk(mu_);
      reader_cv_.wait_for(lk, opts_.read_batch, [&] { return stop_ || hurry_; });
    }
    {
      std::lock_guard lk(mu_);
      hurry_ = false;
    }
    if (steady::now() - epoch_checked > std::chrono::seconds(2)) {
      epoch_checked = steady::now();
      if (auto s = sync_epoch(c, reload_why); !s) set_stale(s.error().message);
    }
  }
}

void shared_state::renew_lease(redis_conn& c) {
  auto t0 = steady::now();
  // A gap longer than two lease periods with no replica calling means every replica was gone.
  auto r = eval(c, scripts::renew, sha_renew_,
                {"3", opts_.prefix + "lease", opts_.prefix + "alive", opts_.prefix + "up_since",
                 opts_.replica_id, std::to_string(opts_.lease_ttl.count()),
                 std::to_string(2 * opts_.lease_ttl.count())});
  const bool answered = r && r->type == redis_reply::kind::array && r->elements.size() == 2;
  const bool held = answered && r->elements[0].integer == 1;
  bool was, now;
  {
    std::lock_guard lk(mu_);
    was = t0 < leader_until_ || steady::now() < leader_until_;
    // Held: until the lease would run out in Redis, less a margin for clock rates. Refused:
    // not ours. Unreachable: ours only until it runs out.
    if (answered) leader_until_ = held ? t0 + opts_.lease_ttl * 4 / 5 : steady::time_point{};
    if (answered && r->elements[1].integer >= 0)
      serving_since_ = t0 - std::chrono::milliseconds(r->elements[1].integer);
    now = steady::now() < leader_until_;
  }
  lease_gauge_->set(now ? 1 : 0);
  if (now != was)
    log::info(now ? "lease taken: this replica runs the once-only loops" : "lease lost");
}

// The nodes silent for drop_after come from `<prefix>seen` (node → last heartbeat, on Redis's
// clock, written by the heartbeat script), 1,000 per pass; the expire script checks each record
// again. Now and then (full_scan) the pass checks every node in `<prefix>nodes` instead, which
// holds every name in `seen` and also records that never made it there (written before it
// existed, or by a replica of an older release).
void shared_state::expire_records(redis_conn& c, bool full_scan) {
  const auto drop = static_cast<std::uint64_t>(opts_.drop_after.count());
  std::vector<std::string> candidates;
  if (full_scan) {
    auto members = c.command({"SMEMBERS", opts_.prefix + "nodes"});
    if (!members || members->is_error()) return;
    for (const auto& m : members->elements) candidates.push_back(m.str);
  } else {
    auto now = redis_now_ms(c);
    if (!now || *now <= drop) return;
    auto z = c.command({"ZRANGEBYSCORE", opts_.prefix + "seen", "-inf", std::to_string(*now - drop),
                        "LIMIT", "0", "1000"});
    if (!z || z->is_error()) return;
    for (const auto& e : z->elements) candidates.push_back(e.str);
  }
  std::size_t gone = 0;
  for (const auto& node : candidates) {
    auto r = eval(c, scripts::expire, sha_expire_,
                  {"4", opts_.prefix + "n:" + node, opts_.prefix + "h:" + node,
                   opts_.prefix + "nodes", opts_.prefix + "seen", node, std::to_string(drop)});
    if (!r) return;
    gone += r->integer == 1 ? 1 : 0;
  }
  if (gone != 0) log::info("redis: silent nodes' records dropped", log::kv("nodes", gone));
}

void shared_state::publish_announces(redis_conn& c) {
  std::deque<announce_request> batch;
  {
    std::lock_guard lk(mu_);
    batch.swap(announces_);
  }
  if (batch.empty()) return;
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(batch.size());
  for (const auto& a : batch)
    cmds.push_back(
        announce_entry(a, opts_.prefix + "log", opts_.log_max_entries, opts_.replica_id));
  auto r = c.pipeline(cmds);
  if (!r) announces_dropped_->inc(static_cast<double>(batch.size()));
}

void shared_state::upkeep_loop() {
  redis_conn c(opts_.redis);
  auto next_lease = steady::now();
  auto next_expire = steady::now() + std::chrono::seconds(5);
  auto next_role = steady::now();
  auto next_full_scan = steady::now();
  while (!stop_) {
    {
      std::unique_lock lk(mu_);
      upkeep_cv_.wait_for(lk, milliseconds(200),
                          [&] { return stop_ || !announces_.empty() || !jobs_changed_.empty(); });
    }
    if (stop_) break;
    publish_announces(c);
    publish_jobs(c);
    auto now = steady::now();
    if (now >= next_role && opts_.wait_replicas > 0) {
      check_replicas(c);
      next_role = now + std::chrono::seconds(1);
    }
    if (now >= next_lease) {
      renew_lease(c);
      next_lease = now + opts_.lease_ttl / 5;
    }
    if (now >= next_expire && leader()) {
      const bool full = now >= next_full_scan;
      expire_records(c, full);
      next_expire = now + std::chrono::seconds(5);
      if (full)
        next_full_scan =
            now + std::max<steady::duration>(opts_.drop_after, std::chrono::minutes(1));
    }
  }
  if (leader()) {  // a clean stop hands the lease on at once
    (void)c.command({"EVAL",
                     "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end",
                     "1", opts_.prefix + "lease", opts_.replica_id});
  }
}

}  // namespace shoal::scheduler

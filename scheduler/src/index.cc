#include "scheduler/index.h"

#include <algorithm>
#include <bit>
#include <mutex>

namespace shoal::scheduler {

bool parse_info_hash(std::string_view hex, info_hash& out) {
  if (hex.size() != 40) return false;
  auto v = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < 20; ++i) {
    int hi = v(hex[2 * i]), lo = v(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

cluster_index::cluster_index(index_options opts, std::string epoch,
                             std::function<clock::time_point()> now)
    : opts_(std::move(opts)), epoch_(std::move(epoch)), now_(std::move(now)) {}

std::string cluster_index::platform_of(const std::map<std::string, std::string>& labels) const {
  if (auto it = labels.find("platform"); it != labels.end() && !it->second.empty())
    return it->second;
  auto os = labels.find("kubernetes.io/os");
  auto arch = labels.find("kubernetes.io/arch");
  if (os != labels.end() && arch != labels.end() && !os->second.empty() && !arch->second.empty()) {
    return os->second + "/" + arch->second;
  }
  return opts_.default_platform;
}

void cluster_index::remember(const digest& d) {
  if (opts_.max_seen == 0 || !seen_.insert(d).second) return;
  seen_order_.push_back(d);
  while (seen_order_.size() > opts_.max_seen) {
    log_change(seen_order_.front(), 0, holding_change::kind::forgotten, false);
    seen_.erase(seen_order_.front());
    seen_order_.pop_front();
  }
}

void cluster_index::log_change(const digest& d, std::uint32_t node, holding_change::kind what,
                               bool seen) {
  if (opts_.change_log == 0) return;
  if (log_.empty()) log_.resize(opts_.change_log);
  auto& c = log_[log_next_ % log_.size()];
  c.id = d;
  c.node = node;
  c.what = what;
  c.seen = seen;
  ++log_next_;
}

cluster_index::object_ptr cluster_index::add_holder(node_entry& n, const heartbeat::held_object& o,
                                                    std::vector<info_hash>* hashes) {
  auto [it, fresh] = objects_.try_emplace(o.id);
  // seen_ learns an object when it enters the index and again when it leaves (remove_holder):
  // while it is in objects_ its holders say it is in the cluster, so a holding need not hash it
  // into seen_ once more.
  if (fresh) remember(o.id);
  object_ptr p = &*it;
  auto& e = p->second;
  if (o.size != 0) e.size = o.size;
  if (!o.info_hash.empty()) e.info_hash = o.info_hash;
  if (!o.kind.empty()) e.kind = o.kind;
  if (n.held.insert(p).second) {
    n.held_version = ++held_versions_;
    auto pos = std::lower_bound(e.holders.begin(), e.holders.end(), n.id);
    if (pos == e.holders.end() || *pos != n.id) e.holders.insert(pos, n.id);
    n.bytes_held += e.size;
    ++holdings_;
    log_change(o.id, n.id, holding_change::kind::added, true);
  }
  info_hash ih;
  if (hashes && !e.info_hash.empty() && parse_info_hash(e.info_hash, ih)) hashes->push_back(ih);
  return p;
}

void cluster_index::remove_holder(node_entry& n, const digest& d, std::vector<info_hash>* hashes) {
  auto it = objects_.find(d);
  if (it != objects_.end()) remove_holder(n, &*it, hashes);
}

void cluster_index::remove_holder(node_entry& n, object_ptr p, std::vector<info_hash>* hashes) {
  if (n.held.erase(p) == 0) return;
  n.held_version = ++held_versions_;
  --holdings_;
  auto& e = p->second;
  n.bytes_held -= std::min(n.bytes_held, e.size);
  auto pos = std::lower_bound(e.holders.begin(), e.holders.end(), n.id);
  if (pos != e.holders.end() && *pos == n.id) e.holders.erase(pos);
  info_hash ih;
  if (hashes && !e.info_hash.empty() && parse_info_hash(e.info_hash, ih)) hashes->push_back(ih);
  if (e.holders.empty()) {
    const digest d = p->first;  // erase() must not read a key inside the element it frees
    objects_.erase(d);
    remember(d);  // it was in the cluster (and may have left seen_'s window meanwhile)
    log_change(d, n.id, holding_change::kind::removed, seen_.count(d) > 0);
  } else {
    log_change(p->first, n.id, holding_change::kind::removed, true);
  }
}

bool cluster_index::holds_locked(const node_entry& n, const digest& d) const {
  auto it = objects_.find(d);
  // held stores non-const pointers; the lookup only compares addresses.
  return it != objects_.end() && n.held.count(const_cast<object_ptr>(&*it)) != 0;
}

bool cluster_index::refuse_locked(const heartbeat::message& m, const node_entry* n,
                                  apply_outcome& out) const {
  if (!n && nodes_.size() >= opts_.max_nodes) {
    out.refused = 429;
    out.refused_reason = "the scheduler already knows " + std::to_string(nodes_.size()) +
                         " nodes (nodes.max_nodes); new node \"" + m.node + "\" refused";
    return true;
  }
  // The node's object count once this message is applied (a delta that will be answered with
  // resync applies nothing, but counting it anyway keeps this simple and conservative).
  std::size_t after = m.objects.size();
  if (!m.full && n) {
    // A delta adds at most its objects; only near the cap are they looked up one by one.
    after = n->held.size() + m.objects.size();
    if (after > opts_.max_objects_per_node) {
      after = n->held.size();
      for (const auto& o : m.objects) after += holds_locked(*n, o.id) ? 0 : 1;
      for (const auto& d : m.removed) after -= std::min<std::size_t>(after, holds_locked(*n, d));
    }
  }
  if (after > opts_.max_objects_per_node) {
    out.refused = 413;
    out.refused_reason = "node \"" + m.node + "\" would hold " + std::to_string(after) +
                         " objects, more than " + std::to_string(opts_.max_objects_per_node) +
                         " (nodes.max_objects_per_node)";
    return true;
  }
  return false;
}

std::string cluster_index::epoch() const {
  std::shared_lock lk(mu_);
  return epoch_;
}

void cluster_index::set_epoch(std::string epoch) {
  std::unique_lock lk(mu_);
  epoch_ = std::move(epoch);
}

apply_outcome cluster_index::refused(const heartbeat::message& m) const {
  std::shared_lock lk(mu_);
  apply_outcome out;
  auto it = nodes_.find(m.node);
  (void)refuse_locked(m, it == nodes_.end() ? nullptr : &it->second, out);
  return out;
}

namespace {

bool same_gpus(const std::vector<heartbeat::gpu_group>& a,
               const std::vector<heartbeat::gpu_group>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].model != b[i].model || a[i].count != b[i].count) return false;
  }
  return true;
}

}  // namespace

std::optional<cluster_index::full_plan> cluster_index::plan_full(
    const heartbeat::message& m) const {
  std::shared_lock lk(mu_);
  auto it = nodes_.find(m.node);
  if (it == nodes_.end()) return std::nullopt;
  return plan_full_locked(it->second, m);
}

cluster_index::full_plan cluster_index::plan_full_locked(const node_entry& n,
                                                         const heartbeat::message& m) const {
  full_plan plan;
  plan.version = n.held_version;
  if (n.held.empty()) {  // a new node (every node after a restart): all of it is fresh
    plan.fresh.resize(m.objects.size());
    for (std::uint32_t k = 0; k < plan.fresh.size(); ++k) plan.fresh[k] = k;
    return plan;
  }
  std::unordered_set<object_ptr> listed;
  listed.reserve(m.objects.size());
  for (std::uint32_t k = 0; k < m.objects.size(); ++k) {
    const auto& o = m.objects[k];
    auto found = objects_.find(o.id);
    // held stores non-const pointers; the lookups only compare addresses.
    auto p = found == objects_.end() ? nullptr : const_cast<object_ptr>(&*found);
    if (!p || !n.held.count(p)) {
      plan.fresh.push_back(k);
      continue;
    }
    listed.insert(p);
    const auto& e = p->second;
    if ((o.size != 0 && o.size != e.size) || (!o.info_hash.empty() && o.info_hash != e.info_hash) ||
        (!o.kind.empty() && o.kind != e.kind)) {
      plan.fresh.push_back(k);  // held, with details to record
      continue;
    }
    info_hash ih;
    if (!e.info_hash.empty() && parse_info_hash(e.info_hash, ih)) plan.kept_hashes.push_back(ih);
  }
  if (n.held.size() != listed.size()) {  // else the node holds exactly what it listed
    for (object_ptr p : n.held) {
      if (!listed.count(p)) plan.gone.push_back(p);
    }
  }
  return plan;
}

void cluster_index::apply_full_locked(node_entry& n, const heartbeat::message& m,
                                      std::optional<full_plan> plan, apply_outcome& out) {
  // The plan made under the shared lock, if the node's holdings are still as it saw them (then
  // every pointer in `gone` is still in objects_); else one made now.
  if (!plan || plan->version != n.held_version) plan = plan_full_locked(n, m);
  for (std::uint32_t k : plan->fresh) add_holder(n, m.objects[k], &out.added);
  out.added.insert(out.added.end(), plan->kept_hashes.begin(), plan->kept_hashes.end());
  for (object_ptr p : plan->gone) remove_holder(n, p, nullptr);
  n.seq = m.seq;
  n.synced = true;
  out.full = true;
}

// Most heartbeats repeat the inventory: labels, health reasons and the netsetup document are
// copied only when they changed (a copy allocates every entry again; this was most of a delta's
// cost after decoding).
apply_outcome cluster_index::apply(const heartbeat::message& m, std::string_view source_ip,
                                   const apply_decision* decided) {
  auto now = now_() - (decided ? decided->age : std::chrono::milliseconds(0));
  std::optional<full_plan> plan;
  if (m.full) {
    plan = plan_full(m);
    if (opts_.between_plan_and_apply_for_test) opts_.between_plan_and_apply_for_test();
  }
  std::unique_lock lk(mu_);
  apply_outcome out;
  auto it = nodes_.find(m.node);
  bool known = it != nodes_.end();
  if (!decided && refuse_locked(m, known ? &it->second : nullptr, out)) return out;
  if (!known) {
    node_entry fresh;
    fresh.id = next_id_++;
    names_[fresh.id] = m.node;
    it = nodes_.emplace(m.node, std::move(fresh)).first;
  }
  node_entry& n = it->second;
  // Only what a node_view shows invalidates the shared node snapshot; the GPU list is compared
  // by what the view keeps of it (total count, first model).
  // A node that was unreachable is reachable again: snapshots only expire by time for nodes
  // going the other way.
  bool was_unreachable = known && now - n.last_seen >= opts_.unhealthy_after;
  // A delta may say its document is the one this node sent before (netsetup_unchanged).
  const bool new_netsetup = !m.netsetup_unchanged && n.netsetup.str() != m.netsetup;
  if (!known || was_unreachable || n.inv.labels != m.labels || new_netsetup ||
      n.inv.health != m.health || n.inv.leaving != m.leaving || !same_gpus(n.inv.gpus, m.gpus)) {
    ++nodes_generation_;
  }
  std::string ip = m.ip.empty() ? std::string(source_ip) : m.ip;
  if (known && n.inv.bt_port != 0 && (n.ip != ip || n.inv.bt_port != m.bt_port)) {
    out.moved_from_ip = n.ip;
    out.moved_from_port = n.inv.bt_port;
  }
  n.inv.schema = m.schema;
  n.inv.node = m.node;
  if (n.inv.labels != m.labels) n.inv.labels = m.labels;  // (no copy when unchanged)
  n.inv.ip = m.ip;
  n.inv.bt_port = m.bt_port;
  n.inv.http_port = m.http_port;
  n.inv.epoch = m.epoch;
  n.inv.cache_capacity = m.cache_capacity;
  n.inv.cache_used = m.cache_used;
  n.inv.gpus = m.gpus;
  n.inv.rdma = m.rdma;
  if (new_netsetup) {  // (no copy of the document when unchanged)
    n.netsetup = shared_text(m.netsetup);
    n.netsetup_rev = m.netsetup.empty() ? 0 : ++netsetup_revs_;
  }
  n.inv.health = m.health;
  if (n.inv.health_reasons != m.health_reasons) n.inv.health_reasons = m.health_reasons;
  n.inv.datasets = m.datasets;
  n.inv.leaving = m.leaving;
  n.ip = std::move(ip);
  n.last_seen = now;
  out.ip = n.ip;

  if (m.full) {
    apply_full_locked(n, m, std::move(plan), out);
    return out;
  }
  if (decided) {
    out.resync = decided->verdict != "ok";
    if (out.resync) out.resync_reason = decided->verdict;
  } else if (!known || !n.synced) {
    out.resync = true;
    out.resync_reason = "unknown_node";
  } else if (m.epoch != epoch_) {
    out.resync = true;
    out.resync_reason = "epoch";
  } else if (m.seq != n.seq + 1) {
    out.resync = true;
    out.resync_reason = "gap";
  } else if (out.moved_from_port != 0) {
    // Its tracker entries at the old endpoint go: the full list puts them at the new one.
    out.resync = true;
    out.resync_reason = "moved";
  }
  if (out.resync) {
    // Until the full list arrives, what we have is kept (it is the best guess) but no further
    // delta is applied on top of it.
    n.synced = false;
    return out;
  }
  for (const auto& o : m.objects) add_holder(n, o, &out.added);
  for (const auto& d : m.removed) remove_holder(n, d, &out.removed);
  n.seq = m.seq;
  return out;
}

std::vector<dropped_node> cluster_index::expire() {
  auto now = now_();
  // Looked for under the shared lock, which decisions share: the walk over every node (once a
  // second) held the exclusive one and stopped them all. Exclusive only when a node goes.
  std::vector<std::string> silent;
  {
    std::shared_lock lk(mu_);
    for (const auto& [name, n] : nodes_) {
      if (now - n.last_seen >= opts_.drop_after) silent.push_back(name);
    }
  }
  std::vector<dropped_node> out;
  if (silent.empty()) return out;
  std::unique_lock lk(mu_);
  for (const auto& name : silent) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) continue;
    auto& n = it->second;
    if (now - n.last_seen < opts_.drop_after) continue;  // heard from meanwhile
    out.push_back({it->first, n.ip, n.inv.bt_port});
    std::vector<object_ptr> held(n.held.begin(), n.held.end());
    for (object_ptr p : held) remove_holder(n, p, nullptr);
    names_.erase(n.id);
    nodes_.erase(it);
    ++nodes_generation_;
  }
  return out;
}

bool cluster_index::healthy_locked(const node_entry& n, clock::time_point now) const {
  return now - n.last_seen < opts_.unhealthy_after && n.inv.health != "failing" && !n.inv.leaving;
}

void cluster_index::liveness_locked(node_summary& s, const node_entry& n,
                                    clock::time_point now) const {
  s.name = n.inv.node;
  s.ip = n.ip;
  s.bt_port = n.inv.bt_port;
  s.netsetup = n.netsetup;  // a pointer's copy
  s.netsetup_rev = n.netsetup_rev;
  s.health = n.inv.health;
  s.health_reasons = n.inv.health_reasons;
  s.healthy = healthy_locked(n, now);
  s.leaving = n.inv.leaving;
  s.last_seen_s = std::chrono::duration<double>(now - n.last_seen).count();
  s.seq = n.seq;
  s.synced = n.synced;
}

node_summary cluster_index::summary_locked(const node_entry& n, clock::time_point now) const {
  node_summary s;
  liveness_locked(s, n, now);
  s.labels = n.inv.labels;
  s.platform = platform_of(n.inv.labels);
  s.http_port = n.inv.http_port;
  s.gpus = n.inv.gpus;
  s.rdma = n.inv.rdma;
  s.datasets = n.inv.datasets;
  s.cache_capacity = n.inv.cache_capacity;
  s.cache_used = n.inv.cache_used;
  s.objects = n.held.size();
  s.bytes_held = n.bytes_held;
  s.schema = n.inv.schema;
  return s;
}

std::vector<node_summary> cluster_index::nodes() const {
  auto now = now_();
  std::shared_lock lk(mu_);
  std::vector<node_summary> out;
  out.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) out.push_back(summary_locked(n, now));
  return out;
}

std::vector<node_summary> cluster_index::liveness() const {
  auto now = now_();
  std::shared_lock lk(mu_);
  std::vector<node_summary> out;
  out.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) liveness_locked(out.emplace_back(), n, now);
  return out;
}

std::optional<node_summary> cluster_index::node(std::string_view name) const {
  auto now = now_();
  std::shared_lock lk(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return std::nullopt;
  return summary_locked(it->second, now);
}

bool cluster_index::healthy(std::string_view name) const {
  auto now = now_();
  std::shared_lock lk(mu_);
  auto it = nodes_.find(name);
  return it != nodes_.end() && healthy_locked(it->second, now);
}

std::optional<object_summary> cluster_index::object(const digest& d) const {
  auto now = now_();
  std::shared_lock lk(mu_);
  auto it = objects_.find(d);
  if (it == objects_.end()) return std::nullopt;
  object_summary s;
  s.ref = {d, it->second.size};
  s.info_hash = it->second.info_hash;
  s.kind = it->second.kind;
  for (auto id : it->second.holders) {
    auto nm = names_.find(id);
    if (nm == names_.end()) continue;
    auto n = nodes_.find(nm->second);
    if (n == nodes_.end()) continue;
    const auto& labels = n->second.inv.labels;
    auto get = [&](const char* k) {
      auto l = labels.find(k);
      return l == labels.end() ? std::string() : l->second;
    };
    s.holders.push_back({nm->second, healthy_locked(n->second, now), get("zone"), get("rack")});
  }
  std::sort(s.holders.begin(), s.holders.end(),
            [](const auto& a, const auto& b) { return a.node < b.node; });
  return s;
}

std::shared_ptr<const cluster_index::node_snapshot> cluster_index::snapshot_locked(
    clock::time_point now) const {
  std::shared_ptr<const node_snapshot> snap;
  {
    std::lock_guard lk(snapshot_mu_);
    snap = snapshot_;
  }
  if (snap && snap->generation == nodes_generation_ && snap->built_at <= now &&
      now < snap->valid_until) {
    return snap;
  }

  auto fresh = std::make_shared<node_snapshot>();
  fresh->generation = nodes_generation_;
  fresh->built_at = now;
  fresh->valid_until = clock::time_point::max();
  fresh->nodes.reserve(nodes_.size());
  std::vector<std::uint32_t> index_of(next_id_, node_snapshot::npos);
  for (const auto& [name, n] : nodes_) {
    node_view nv;
    nv.name = name;
    nv.labels = n.inv.labels;
    auto get = [&](const char* k) {
      auto l = n.inv.labels.find(k);
      return l == n.inv.labels.end() ? std::string() : l->second;
    };
    nv.zone = get("zone");
    nv.rack = get("rack");
    nv.fabric = get("fabric");
    nv.platform = platform_of(n.inv.labels);
    bool reachable = now - n.last_seen < opts_.unhealthy_after;
    nv.healthy = healthy_locked(n, now);
    nv.health = reachable ? n.inv.health : "unreachable";
    for (const auto& g : n.inv.gpus) {
      nv.gpus += g.count;
      if (nv.gpu_model.empty()) nv.gpu_model = g.model;
    }
    nv.netsetup = n.netsetup;  // a pointer's copy
    nv.netsetup_rev = n.netsetup_rev;
    if (n.id < index_of.size()) index_of[n.id] = static_cast<std::uint32_t>(fresh->nodes.size());
    if (reachable)
      fresh->valid_until = std::min(fresh->valid_until, n.last_seen + opts_.unhealthy_after);
    fresh->nodes.push_back(std::move(nv));
  }
  fresh->classes = make_classes(fresh->nodes);
  fresh->classes.index_of_id = std::move(index_of);
  std::lock_guard lk(snapshot_mu_);
  // Another reader may have rebuilt it meanwhile from the same state; either copy is right.
  snapshot_ = fresh;
  return fresh;
}

node_list cluster_index::list_of(const std::shared_ptr<const node_snapshot>& snap) {
  return node_list(std::shared_ptr<const std::vector<node_view>>(snap, &snap->nodes),
                   std::shared_ptr<const node_classes>(snap, &snap->classes));
}

cluster_view cluster_index::view(std::span<const digest> objects) const {
  auto now = now_();
  std::shared_lock lk(mu_);
  auto snap = snapshot_locked(now);
  cluster_view v;
  v.changes = log_next_;
  v.nodes = list_of(snap);
  const auto& index_of = snap->classes.index_of_id;
  // Holders are kept by node id; the view wants node indexes, sorted. A popular object is on
  // thousands of nodes, so instead of sorting its list the indexes are set in a bitmap of all
  // nodes and read back in order (O(nodes / 64 + holders)).
  const std::size_t count = snap->nodes.size();
  std::vector<std::uint64_t> bits((count + 63) / 64, 0);
  v.objects.reserve(objects.size());
  for (const auto& d : objects) {
    if (v.objects.count(d)) continue;
    object_view ov;
    ov.ref.id = d;
    ov.seen_before = seen_.count(d) > 0;
    auto it = objects_.find(d);
    if (it != objects_.end()) {
      ov.ref.size = it->second.size;
      const auto& ids = it->second.holders;
      ov.holders.reserve(ids.size());
      if (ids.size() < 64) {
        for (auto id : ids) {
          if (id < index_of.size() && index_of[id] != node_snapshot::npos)
            ov.holders.push_back(index_of[id]);
        }
        std::sort(ov.holders.begin(), ov.holders.end());
      } else {
        for (auto id : ids) {
          if (id < index_of.size() && index_of[id] != node_snapshot::npos) {
            auto x = index_of[id];
            bits[x / 64] |= std::uint64_t{1} << (x % 64);
          }
        }
        for (std::size_t w = 0; w < bits.size(); ++w) {
          for (auto b = bits[w]; b != 0; b &= b - 1)
            ov.holders.push_back(static_cast<std::uint32_t>(w * 64 + std::countr_zero(b)));
          bits[w] = 0;
        }
      }
    }
    v.objects.emplace(d, std::move(ov));
  }
  return v;
}

std::optional<std::uint64_t> cluster_index::changes_since(
    std::uint64_t since, const std::function<bool(const node_list&)>& on_nodes,
    const std::function<void(const holding_change&)>& on_change) const {
  auto now = now_();
  std::shared_lock lk(mu_);
  if (since > log_next_ || log_next_ - since > log_.size()) return std::nullopt;
  auto snap = snapshot_locked(now);
  if (!on_nodes(list_of(snap))) return std::nullopt;
  for (std::uint64_t s = since; s < log_next_; ++s) on_change(log_[s % log_.size()]);
  return log_next_;
}

cluster_index::held_summary cluster_index::held(std::string_view node,
                                                std::span<const object_ref> objects) const {
  std::shared_lock lk(mu_);
  held_summary s;
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return s;
  for (const auto& o : objects) {
    if (holds_locked(it->second, o.id)) {
      ++s.count;
      s.bytes += o.size;
    }
  }
  return s;
}

index_stats cluster_index::stats() const {
  auto now = now_();
  std::shared_lock lk(mu_);
  index_stats s;
  s.nodes = nodes_.size();
  for (const auto& [name, n] : nodes_) s.healthy_nodes += healthy_locked(n, now) ? 1 : 0;
  s.objects = objects_.size();
  s.holdings = holdings_;
  return s;
}

}  // namespace shoal::scheduler

#include "scheduler/scores.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace shoal::scheduler {

namespace {

constexpr std::uint32_t npos = node_classes::npos;

// The first 8 bytes of a digest: sha256 output, so spread; a sender who picks digests sharing a
// job object's prefix only lengthens the probe within a table of the job's own objects.
std::uint64_t prefix_of(const digest& d) {
  std::uint64_t h = 0;
  std::memcpy(&h, d.bytes().data(), sizeof h);
  return h;
}

// CSR of `of` (node → group, npos for none) over `groups` groups.
void members(const std::vector<std::uint32_t>& of, std::uint32_t groups,
             std::vector<std::uint32_t>& start, std::vector<std::uint32_t>& nodes) {
  start.assign(std::size_t{groups} + 1, 0);
  for (auto g : of) {
    if (g != npos) ++start[g + 1];
  }
  for (std::size_t g = 0; g < groups; ++g) start[g + 1] += start[g];
  nodes.assign(start[groups], 0);
  std::vector<std::uint32_t> at(start.begin(), start.end() - 1);
  for (std::uint32_t i = 0; i < of.size(); ++i) {
    if (of[i] != npos) nodes[at[of[i]]++] = i;
  }
}

}  // namespace

std::unique_ptr<job_scores> job_scores::build(const cluster_view& v,
                                              std::span<const object_ref> objects,
                                              const cost_model& m) {
  auto cls = classes_of(v.nodes);
  // Each rack in one zone, or the sums do not nest (scores.h).
  std::vector<std::uint32_t> zone_of_rack(cls->racks, npos - 1);
  for (std::size_t i = 0; i < cls->rack.size(); ++i) {
    const auto r = cls->rack[i];
    if (r == npos) continue;
    if (zone_of_rack[r] == npos - 1) zone_of_rack[r] = cls->zone[i];
    if (zone_of_rack[r] != cls->zone[i]) return nullptr;
  }
  std::unique_ptr<job_scores> s(new job_scores(m));
  s->cls_ = *cls;
  s->list_ = cls;
  s->seq_ = v.changes;
  const std::size_t n = cls->rack.size(), racks = cls->racks, zones = cls->zones;
  const std::size_t k_count = objects.size();
  s->ids_.reserve(k_count);
  s->size_.assign(k_count, 0);
  s->sized_by_view_.assign(k_count, 0);
  s->all_.assign(k_count, 0);
  s->any_.assign(k_count, 0);
  s->in_s_.assign(k_count, 0);
  s->in_rack_.assign(k_count * racks, 0);
  s->in_zone_.assign(k_count * zones, 0);
  s->local_.assign(n, 0);
  s->rack_sum_.assign(racks, 0);
  s->zone_sum_.assign(zones, 0);
  s->slots_.assign(std::bit_ceil(std::max<std::size_t>(8, k_count * 4)), npos);
  for (std::size_t k = 0; k < k_count; ++k) {
    const auto& o = objects[k];
    s->ids_.push_back(o.id);
    for (std::size_t at = prefix_of(o.id) & (s->slots_.size() - 1);;
         at = (at + 1) & (s->slots_.size() - 1)) {
      if (s->slots_[at] == npos) {
        s->slots_[at] = static_cast<std::uint32_t>(k);
        break;
      }
    }
    std::uint64_t size = o.size;
    auto it = v.objects.find(o.id);
    const object_view* ov = it == v.objects.end() ? nullptr : &it->second;
    if (size == 0) {
      s->sized_by_view_[k] = 1;
      if (ov) size = ov->ref.size;
    }
    s->size_[k] = size;
    s->total_ += size;
    if (!ov) continue;
    s->in_s_[k] = ov->seen_before || !ov->holders.empty() ? 1 : 0;
    for (auto h : ov->holders) {
      if (h >= n) continue;
      ++s->all_[k];
      s->local_[h] += size;
      if (!cls->healthy[h]) continue;
      ++s->any_[k];
      if (cls->rack[h] != npos) ++s->in_rack_[k * racks + cls->rack[h]];
      if (cls->zone[h] != npos) ++s->in_zone_[k * zones + cls->zone[h]];
    }
  }
  for (std::size_t k = 0; k < k_count; ++k) {
    const auto size = s->size_[k];
    if (s->in_s_[k]) s->seen_sum_ += size;
    if (s->any_[k]) s->any_sum_ += size;
    for (std::size_t r = 0; r < racks; ++r) {
      if (s->in_rack_[k * racks + r]) s->rack_sum_[r] += size;
    }
    for (std::size_t z = 0; z < zones; ++z) {
      if (s->in_zone_[k * zones + z]) s->zone_sum_[z] += size;
    }
  }
  members(cls->rack, cls->racks, s->rack_start_, s->rack_nodes_);
  members(cls->zone, cls->zones, s->zone_start_, s->zone_nodes_);
  s->bounds_ = score_bounds(m.cold_seconds(s->total_));
  s->scores_.assign(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) s->rescore(i);
  return s;
}

node_cost job_scores::cost(std::uint32_t node) const {
  node_cost c;
  c.bytes_total = total_;
  const std::uint64_t local = local_[node];
  c.by_source[static_cast<std::size_t>(source::local)] = local;
  if (!cls_.healthy[node]) return c;
  auto put = [&](source s, std::uint64_t bytes) {
    c.by_source[static_cast<std::size_t>(s)] = bytes;
  };
  std::uint64_t below = local;
  if (const auto r = cls_.rack[node]; r != npos) {
    put(source::rack, rack_sum_[r] - below);
    below = rack_sum_[r];
  }
  if (const auto z = cls_.zone[node]; z != npos) {
    put(source::zone, zone_sum_[z] - below);
    below = zone_sum_[z];
  }
  put(source::cluster, any_sum_ - below);
  put(source::origin, seen_sum_ - any_sum_);
  put(source::upstream, total_ - seen_sum_);
  c.seconds = m_.seconds(c.by_source);
  return c;
}

score_bounds::score_bounds(double cold_seconds) : cold_(cold_seconds) {
  log_cold_ = std::log1p(cold_);
  for (int j = 1; j <= 10; ++j) bound_[j] = std::expm1(log_cold_ * (10.5 - j) / 10.0);
}

int score_bounds::score(double t) const {
  if (cold_ <= 0 || t <= 0) return 10;
  int s = 0;
  while (s < 10 && t <= bound_[s + 1]) ++s;
  auto near = [t](double b) { return std::abs(t - b) <= 1e-9 * b; };
  if ((s < 10 && near(bound_[s + 1])) || (s > 0 && near(bound_[s]))) {
    const double exact = 10.0 * (1.0 - std::log1p(t) / log_cold_);
    return static_cast<int>(std::lround(std::clamp(exact, 0.0, 10.0)));
  }
  return s;
}

void job_scores::rescore(std::uint32_t node) {
  scores_[node] = cls_.healthy[node] && total_ != 0
                      ? static_cast<std::uint8_t>(bounds_.score(cost(node).seconds))
                      : 0;
}

std::uint32_t job_scores::find(const digest& d) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t at = prefix_of(d) & mask;; at = (at + 1) & mask) {
    const auto k = slots_[at];
    if (k == npos || ids_[k] == d) return k;
  }
}

bool job_scores::on(const node_list& nodes) const {
  const auto& c = nodes.classes();
  return c && !list_.owner_before(c) && !c.owner_before(list_);
}

bool job_scores::same_nodes(const node_classes& c) const {
  return c.racks == cls_.racks && c.zones == cls_.zones && c.healthy == cls_.healthy &&
         c.rack == cls_.rack && c.zone == cls_.zone && c.platform == cls_.platform &&
         c.index_of_id == cls_.index_of_id && c.platforms == cls_.platforms;
}

bool job_scores::apply(const holding_change& c) {
  const std::uint32_t k = find(c.id);
  if (k == npos) return true;
  const std::uint64_t size = size_[k];
  auto set_s = [&](bool in) {
    if (in == (in_s_[k] != 0)) return;
    in_s_[k] = in ? 1 : 0;
    seen_sum_ = in ? seen_sum_ + size : seen_sum_ - size;
    all_dirty_ = true;
  };
  if (c.what == holding_change::kind::forgotten) {
    if (all_[k] == 0) set_s(false);
    return true;
  }
  // The job gave no size and the index's may change with its holders.
  if (sized_by_view_[k]) return false;
  if (c.node >= cls_.index_of_id.size()) return false;
  const std::uint32_t i = cls_.index_of_id[c.node];
  if (i == npos || i >= local_.size()) return false;  // a node the list lacks: it changed
  const bool healthy = cls_.healthy[i] != 0;
  const std::uint32_t r = cls_.rack[i], z = cls_.zone[i];
  const std::size_t racks = cls_.racks, zones = cls_.zones;
  dirty_nodes_.push_back(i);
  if (c.what == holding_change::kind::added) {
    local_[i] += size;
    ++all_[k];
    set_s(true);
    if (!healthy) return true;
    if (any_[k]++ == 0) {
      any_sum_ += size;
      all_dirty_ = true;
    }
    if (r != npos && in_rack_[k * racks + r]++ == 0) {
      rack_sum_[r] += size;
      dirty_racks_.push_back(r);
    }
    if (z != npos && in_zone_[k * zones + z]++ == 0) {
      zone_sum_[z] += size;
      dirty_zones_.push_back(z);
    }
    return true;
  }
  // removed: every count it lowers was raised by this node's add (or the build).
  if (all_[k] == 0 || local_[i] < size) return false;
  local_[i] -= size;
  if (--all_[k] == 0) set_s(c.seen);
  if (!healthy) return true;
  if (any_[k] == 0 || (r != npos && in_rack_[k * racks + r] == 0) ||
      (z != npos && in_zone_[k * zones + z] == 0))
    return false;
  if (--any_[k] == 0) {
    any_sum_ -= size;
    all_dirty_ = true;
  }
  if (r != npos && --in_rack_[k * racks + r] == 0) {
    rack_sum_[r] -= size;
    dirty_racks_.push_back(r);
  }
  if (z != npos && --in_zone_[k * zones + z] == 0) {
    zone_sum_[z] -= size;
    dirty_zones_.push_back(z);
  }
  return true;
}

bool job_scores::catch_up(const cluster_index& idx) {
  bool ok = true;
  all_dirty_ = false;
  dirty_nodes_.clear();
  dirty_racks_.clear();
  dirty_zones_.clear();
  auto next = idx.changes_since(
      seq_,
      [&](const node_list& nodes) {
        if (on(nodes)) return true;
        // A new snapshot of the same nodes (rebuilt because time passed) keeps the state.
        auto c = classes_of(nodes);
        if (!same_nodes(*c)) return false;
        list_ = nodes.classes();
        return true;
      },
      [&](const holding_change& c) {
        if (ok) ok = apply(c);
      });
  if (!next || !ok) return false;
  seq_ = *next;
  rescored_ = 0;
  if (all_dirty_) {
    for (std::uint32_t i = 0; i < scores_.size(); ++i) rescore(i);
    rescored_ = scores_.size();
    return true;
  }
  auto group = [&](const std::vector<std::uint32_t>& start, const std::vector<std::uint32_t>& of,
                   std::vector<std::uint32_t>& ids) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (auto g : ids) {
      for (auto at = start[g]; at < start[g + 1]; ++at) rescore(of[at]);
      rescored_ += start[g + 1] - start[g];
    }
  };
  group(zone_start_, zone_nodes_, dirty_zones_);
  group(rack_start_, rack_nodes_, dirty_racks_);
  for (auto i : dirty_nodes_) rescore(i);
  rescored_ += dirty_nodes_.size();
  return true;
}

score_cache::outcome score_cache::with(const cluster_index& idx, std::string_view platform,
                                       std::span<const object_ref> objects, const cost_model& m,
                                       const std::function<void(const job_scores&)>& fn) {
  std::string key(platform);
  key += '\0';
  key.reserve(key.size() + objects.size() * (digest::size + 8));
  for (const auto& o : objects) {
    key.append(reinterpret_cast<const char*>(o.id.bytes().data()), digest::size);
    key.append(reinterpret_cast<const char*>(&o.size), sizeof o.size);
  }
  std::shared_ptr<entry> e;
  {
    std::lock_guard lk(mu_);
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      e = it->second->second;
    } else {
      e = std::make_shared<entry>();
      lru_.emplace_front(key, e);
      by_key_.emplace(std::move(key), lru_.begin());
      while (lru_.size() > capacity_) {
        by_key_.erase(lru_.back().first);
        lru_.pop_back();
      }
    }
  }
  std::lock_guard lk(e->mu);
  auto how = outcome::caught_up;
  if (e->state && !e->state->catch_up(idx)) {
    e->state.reset();
    how = outcome::rebuilt;
  } else if (!e->state) {
    how = outcome::built;
  }
  if (!e->state) {
    std::vector<digest> ids;
    ids.reserve(objects.size());
    for (const auto& o : objects) ids.push_back(o.id);
    e->state = job_scores::build(idx.view(ids), objects, m);
    if (!e->state) return outcome::none;
  }
  fn(*e->state);
  return how;
}

}  // namespace shoal::scheduler

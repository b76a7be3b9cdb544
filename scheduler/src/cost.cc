#include "scheduler/cost.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <unordered_set>

namespace shoal::scheduler {

std::vector<object_ref> dedup(std::span<const object_ref> objects) {
  std::vector<object_ref> out;
  std::unordered_set<digest, keyed_hash> seen;  // a job's digests: chosen by others
  out.reserve(objects.size());
  for (const auto& o : objects) {
    if (seen.insert(o.id).second) out.push_back(o);
  }
  return out;
}

std::string_view to_string(source s) noexcept {
  switch (s) {
    case source::local:
      return "local";
    case source::rack:
      return "rack";
    case source::zone:
      return "zone";
    case source::cluster:
      return "cluster";
    case source::origin:
      return "origin";
    case source::upstream:
      return "upstream";
  }
  return "unknown";
}

cost_model cost_model::from(const cost_config& c) {
  cost_model m;
  auto bw = [](const config::byte_size& b) {
    return std::max<double>(1.0, static_cast<double>(b.bytes()));
  };
  m.bandwidth = {0,
                 bw(c.rack_bandwidth),
                 bw(c.zone_bandwidth),
                 bw(c.cluster_bandwidth),
                 bw(c.origin_bandwidth),
                 bw(c.upstream_bandwidth)};
  m.ingress = bw(c.node_ingress);
  m.parallel = c.model == "parallel";
  return m;
}

double cost_model::seconds(const bytes_by_source& b) const {
  double worst = 0, sum = 0;
  std::uint64_t total = 0;
  for (std::size_t i = 1; i < source_count; ++i) {
    if (b[i] == 0) continue;
    double t = static_cast<double>(b[i]) / bandwidth[i];
    worst = std::max(worst, t);
    sum += t;
    total += b[i];
  }
  if (!parallel) return sum;
  return std::max(worst, static_cast<double>(total) / ingress);
}

double cost_model::cold_seconds(std::uint64_t bytes) const {
  bytes_by_source b{};
  b[static_cast<std::size_t>(source::upstream)] = bytes;
  return seconds(b);
}

node_classes make_classes(std::span<const node_view> nodes) {
  // A rack is named "zone/rack", as holders and nodes were matched before, so two racks of one
  // name in different zones stay apart.
  node_classes c;
  std::unordered_map<std::string, std::uint32_t> racks;
  std::unordered_map<std::string_view, std::uint32_t> zones, platforms;
  c.rack.assign(nodes.size(), node_classes::npos);
  c.zone.assign(nodes.size(), node_classes::npos);
  c.platform.assign(nodes.size(), 0);
  c.healthy.assign(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& nv = nodes[i];
    c.healthy[i] = nv.healthy ? 1 : 0;
    if (!nv.rack.empty()) {
      auto id = static_cast<std::uint32_t>(racks.size());
      c.rack[i] = racks.try_emplace(nv.zone + "/" + nv.rack, id).first->second;
    }
    if (!nv.zone.empty()) {
      auto id = static_cast<std::uint32_t>(zones.size());
      c.zone[i] = zones.try_emplace(nv.zone, id).first->second;
    }
    auto [it, fresh] =
        platforms.try_emplace(nv.platform, static_cast<std::uint32_t>(platforms.size()));
    if (fresh) c.platforms.push_back(nv.platform);
    c.platform[i] = it->second;
  }
  c.racks = static_cast<std::uint32_t>(racks.size());
  c.zones = static_cast<std::uint32_t>(zones.size());
  return c;
}

std::shared_ptr<const node_classes> classes_of(const node_list& nodes) {
  if (nodes.classes() && nodes.classes()->platform.size() == nodes.size()) return nodes.classes();
  return std::make_shared<const node_classes>(
      make_classes(std::span<const node_view>(nodes.begin(), nodes.size())));
}

evaluator::evaluator(const cluster_view& v, std::span<const object_ref> objects,
                     const cost_model& m)
    : v_(v), m_(m), words_((objects.size() + 63) / 64), classes_(classes_of(v.nodes)) {
  const std::size_t n = v.nodes.size();
  const auto& rack_of = classes_->rack;
  const auto& zone_of = classes_->zone;
  const auto& healthy = classes_->healthy;
  // The objects' entries in the view, and room for every holder's set at once (no regrowth).
  std::vector<const object_view*> found(objects.size(), nullptr);
  std::size_t holdings = 0;
  for (std::size_t k = 0; k < objects.size(); ++k) {
    auto it = v.objects.find(objects[k].id);
    if (it == v.objects.end()) continue;
    found[k] = &it->second;
    holdings += it->second.holders.size();
  }
  slot_of_.assign(n, npos);
  held_.reserve(words_ * (1 + std::min(n, holdings)));
  held_.assign(words_, 0);  // slot 0: the empty set of every node that holds none
  in_rack_.assign(classes_->racks * words_, 0);
  in_zone_.assign(classes_->zones * words_, 0);
  anywhere_.assign(words_, 0);
  seen_.assign(words_, 0);
  sizes_.reserve(objects.size());
  for (std::size_t k = 0; k < objects.size(); ++k) {
    const auto& o = objects[k];
    const std::size_t w = k / 64;
    const std::uint64_t bit = std::uint64_t{1} << (k % 64);
    std::uint64_t size = o.size;
    if (const object_view* ov = found[k]) {
      if (size == 0) size = ov->ref.size;
      // A holder seen now also proves registry-proxy had it once.
      if (ov->seen_before || !ov->holders.empty()) seen_[w] |= bit;
      for (auto h : ov->holders) {
        if (h >= n) continue;
        if (slot_of_[h] == npos) {
          slot_of_[h] = static_cast<std::uint32_t>(held_.size() / words_);
          held_.resize(held_.size() + words_, 0);
        }
        held_[slot_of_[h] * words_ + w] |= bit;
        if (!healthy[h]) continue;
        anywhere_[w] |= bit;
        if (rack_of[h] != npos) in_rack_[rack_of[h] * words_ + w] |= bit;
        if (zone_of[h] != npos) in_zone_[zone_of[h] * words_ + w] |= bit;
      }
    }
    sizes_.push_back(size);
  }
  // Byte tables of sums: entry (w * 8 + b) * 256 + x is the size of the objects whose bits are
  // set in x at byte b of word w, each entry from a smaller one (x without its lowest bit).
  byte_sums_.assign(words_ * 8 * 256, 0);
  for (std::size_t wb = 0; wb < words_ * 8; ++wb) {
    std::uint64_t* t = byte_sums_.data() + wb * 256;
    for (std::uint32_t x = 1; x < 256; ++x) {
      const std::size_t k = wb * 8 + static_cast<std::size_t>(std::countr_zero(x));
      t[x] = t[x & (x - 1)] + (k < sizes_.size() ? sizes_[k] : 0);
    }
  }
}

node_cost evaluator::cost(std::uint32_t node) const {
  (void)v_.nodes.at(node);  // same contract as before: an out-of-range node throws
  node_cost c;
  const std::uint32_t r = classes_->rack[node], z = classes_->zone[node];
  const std::uint64_t* held = set(held_, slot_of_[node] == npos ? 0 : slot_of_[node]);
  const std::uint64_t* rack = r == npos ? nullptr : set(in_rack_, r);
  const std::uint64_t* zone = z == npos ? nullptr : set(in_zone_, z);
  // The sizes of the objects in `bits` (word w): a table read per non-zero byte, not an add per
  // object (a holder's cost is what a decision spends most of its time on).
  auto add = [&](source s, std::uint64_t bits, std::size_t w) {
    auto& total = c.by_source[static_cast<std::size_t>(s)];
    const std::uint64_t* t = byte_sums_.data() + w * 8 * 256;
    for (; bits != 0; bits >>= 8, t += 256) total += t[bits & 0xff];
  };
  for (std::size_t w = 0; w < words_; ++w) {
    // Each object goes to the first class that has it: local, rack, zone, cluster, origin,
    // upstream (cost.h).
    std::uint64_t left = w + 1 < words_ || sizes_.size() % 64 == 0
                             ? ~std::uint64_t{0}
                             : (std::uint64_t{1} << (sizes_.size() % 64)) - 1;
    auto take = [&](source s, std::uint64_t bits) {
      bits &= left;
      left &= ~bits;
      add(s, bits, w);
    };
    take(source::local, held[w]);
    if (rack) take(source::rack, rack[w] & anywhere_[w]);
    if (zone) take(source::zone, zone[w] & anywhere_[w]);
    take(source::cluster, anywhere_[w]);
    take(source::origin, seen_[w]);
    take(source::upstream, left);
  }
  for (auto b : c.by_source) c.bytes_total += b;
  c.seconds = m_.seconds(c.by_source);
  return c;
}

int extender_score(const node_cost& c, const cost_model& m) {
  if (c.bytes_total == 0) return 0;
  double cold = m.cold_seconds(c.bytes_total);
  if (cold <= 0 || c.seconds <= 0) return 10;
  // Logarithmic in seconds: halving the wait counts the same at 2 s as at 200 s, so nodes that
  // are all "warm-ish" still get different scores.
  double s = 10.0 * (1.0 - std::log1p(c.seconds) / std::log1p(cold));
  return static_cast<int>(std::lround(std::clamp(s, 0.0, 10.0)));
}

bool threshold::exceeded(const node_cost& c) const {
  if (is_share) {
    if (c.bytes_total == 0) return false;
    return static_cast<double>(c.missing()) > share * static_cast<double>(c.bytes_total) + 1e-9;
  }
  return c.missing() > bytes;
}

std::string threshold::str() const {
  if (!is_share) return std::to_string(bytes) + " bytes";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", share * 100);
  return buf;
}

std::optional<threshold> parse_threshold(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (s.empty() || s.size() > 32) return std::nullopt;
  threshold t;
  if (s.back() == '%') {
    s.remove_suffix(1);
    double v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !(v >= 0 && v <= 100)) return std::nullopt;
    t.is_share = true;
    t.share = v / 100.0;
    return t;
  }
  auto b = config::byte_size::parse(s);
  if (!b) return std::nullopt;
  t.is_share = false;
  t.bytes = b->bytes();
  return t;
}

}  // namespace shoal::scheduler

#include "cost.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_set>

namespace shoal::scheduler {

std::vector<object_ref> dedup(std::span<const object_ref> objects) {
  std::vector<object_ref> out;
  std::unordered_set<digest> seen;
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

evaluator::evaluator(const cluster_view& v, std::span<const object_ref> objects,
                     const cost_model& m)
    : v_(v), m_(m) {
  objs_.reserve(objects.size());
  for (const auto& o : objects) {
    prepared p;
    p.ref = o;
    auto it = v.objects.find(o.id);
    if (it != v.objects.end()) {
      p.holders = &it->second.holders;
      p.seen_before = it->second.seen_before;
      if (p.ref.size == 0) p.ref.size = it->second.ref.size;
      for (auto h : it->second.holders) {
        if (h >= v.nodes.size() || !v.nodes[h].healthy) continue;
        const auto& n = v.nodes[h];
        p.any_healthy = true;
        if (!n.rack.empty()) p.racks.push_back(n.zone + "/" + n.rack);
        if (!n.zone.empty()) p.zones.push_back(n.zone);
      }
      std::sort(p.racks.begin(), p.racks.end());
      p.racks.erase(std::unique(p.racks.begin(), p.racks.end()), p.racks.end());
      std::sort(p.zones.begin(), p.zones.end());
      p.zones.erase(std::unique(p.zones.begin(), p.zones.end()), p.zones.end());
      // A holder seen now also proves registry-proxy had it once.
      if (!it->second.holders.empty()) p.seen_before = true;
    }
    objs_.push_back(std::move(p));
  }
}

node_cost evaluator::cost(std::uint32_t node) const {
  node_cost c;
  const auto& n = v_.nodes.at(node);
  std::string rack_key = n.rack.empty() ? std::string() : n.zone + "/" + n.rack;
  for (const auto& p : objs_) {
    c.bytes_total += p.ref.size;
    source s = source::upstream;
    if (p.holders && std::binary_search(p.holders->begin(), p.holders->end(), node)) {
      s = source::local;
    } else if (p.any_healthy) {
      if (!rack_key.empty() && std::binary_search(p.racks.begin(), p.racks.end(), rack_key))
        s = source::rack;
      else if (!n.zone.empty() && std::binary_search(p.zones.begin(), p.zones.end(), n.zone))
        s = source::zone;
      else
        s = source::cluster;
    } else if (p.seen_before) {
      s = source::origin;
    }
    c.by_source[static_cast<std::size_t>(s)] += p.ref.size;
  }
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

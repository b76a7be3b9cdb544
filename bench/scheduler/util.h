#pragma once
// Small utilities shared by both parts of scheduler_bench: deterministic randomness, percentiles,
// process measurements, and the names and digests the generated nodes and objects use.
//
// Values and free functions only; rng_t and zipf are single-threaded (each user owns its own).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/digest.h"
#include "common/heartbeat.h"

namespace shoal::scheduler_bench {

using steady = std::chrono::steady_clock;

inline constexpr double MiB = 1024.0 * 1024.0;
inline constexpr double GiB = 1024.0 * MiB;
inline constexpr double TiB = 1024.0 * GiB;

// Deterministic randomness: std::mt19937_64 is specified bit for bit, the distributions of
// <random> are not, so the few distributions needed are written here.
class rng_t {
 public:
  explicit rng_t(std::uint64_t seed) : g_(seed) {}
  double uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  // The modulo bias is below 2^-40 for the ranges used here.
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : g_() % n; }
  double log_uniform(double lo, double hi) { return lo * std::exp(uniform() * std::log(hi / lo)); }
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  std::uint64_t raw() { return g_(); }

 private:
  std::mt19937_64 g_;
};

// Zipf over ranks 0..n-1: P(k) proportional to 1/(k+1)^s. Immutable after construction.
class zipf {
 public:
  zipf(std::size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::size_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = sum;
    }
    for (auto& c : cdf_) c /= sum;
  }
  [[nodiscard]] std::size_t sample(rng_t& r) const {
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), r.uniform());
    return std::min<std::size_t>(static_cast<std::size_t>(it - cdf_.begin()), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

// Nearest-rank percentile (p in 0..100).
[[nodiscard]] double percentile(std::vector<double> v, double p);
[[nodiscard]] double mean(const std::vector<double>& v);
[[nodiscard]] double round3(double v);
// A value in MiB from /proc/self/status ("VmRSS", "VmHWM"); 0 when unreadable.
[[nodiscard]] double proc_status_mib(const std::string& key);
// User + system CPU seconds of the process so far.
[[nodiscard]] double cpu_seconds();
[[nodiscard]] double ms_since(steady::time_point t);
// The digest of generated object i of a name space ("obj", "sim").
[[nodiscard]] digest object_digest(std::string_view space, std::uint64_t i);
[[nodiscard]] heartbeat::held_object held_of(const digest& d, std::uint64_t size);
// The index's clock stands still, so every node stays healthy however long a run takes: the
// benchmark times heartbeats, not their spacing.
[[nodiscard]] std::function<steady::time_point()> frozen_clock();
// "gpu-00042".
[[nodiscard]] std::string node_name(std::size_t i);

}  // namespace shoal::scheduler_bench

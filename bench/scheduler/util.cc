#include "bench/scheduler/util.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/sha256.h"

namespace shoal::scheduler_bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

double proc_status_mib(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      return std::strtod(line.c_str() + key.size() + 1, nullptr) / 1024.0;  // kB
    }
  }
  return 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double ms_since(steady::time_point t) {
  return std::chrono::duration<double, std::milli>(steady::now() - t).count();
}

digest object_digest(std::string_view space, std::uint64_t i) {
  return sha256_of(std::string(space) + ":" + std::to_string(i));
}

heartbeat::held_object held_of(const digest& d, std::uint64_t size) {
  heartbeat::held_object h;
  h.id = d;
  h.size = size;
  h.info_hash = d.hex().substr(0, 40);
  return h;
}

std::function<steady::time_point()> frozen_clock() {
  auto t = steady::now();
  return [t] { return t; };
}

std::string node_name(std::size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gpu-%05zu", i);
  return buf;
}

}  // namespace shoal::scheduler_bench

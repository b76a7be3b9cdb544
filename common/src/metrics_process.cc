// Standard process metrics from /proc/self, computed at scrape time (Linux only).

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace shoal::metrics {
namespace {

constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

// Fields of /proc/self/stat after the command name, which is in parentheses and may itself hold
// spaces or parentheses: fields()[0] is field 3 (state) of proc(5).
std::vector<std::string> stat_fields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> out;
  std::string f;
  while (rest >> f) out.push_back(f);
  return out;
}

// proc(5) field number n (1-based) from stat_fields(), as a double; NaN when absent.
double stat_field(const std::vector<std::string>& fields, std::size_t n) {
  if (n < 3 || n - 3 >= fields.size()) return k_nan;
  try {
    return std::stod(fields[n - 3]);
  } catch (...) {
    return k_nan;
  }
}

double ticks_per_second() {
  const long t = sysconf(_SC_CLK_TCK);
  return t > 0 ? static_cast<double>(t) : 100.0;
}

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double v = 0;
      if (in >> v) return v;
      return k_nan;
    }
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return k_nan;
}

}  // namespace

void register_process_metrics(registry& reg) {
  reg.counter_fn("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                 [] {
                   const auto f = stat_fields();
                   return (stat_field(f, 14) + stat_field(f, 15)) / ticks_per_second();
                 });
  reg.gauge_fn("process_resident_memory_bytes", "Resident memory size in bytes.", [] {
    return stat_field(stat_fields(), 24) * static_cast<double>(sysconf(_SC_PAGESIZE));
  });
  reg.gauge_fn("process_virtual_memory_bytes", "Virtual memory size in bytes.",
               [] { return stat_field(stat_fields(), 23); });
  reg.gauge_fn("process_open_fds", "Number of open file descriptors.", [] {
    std::error_code ec;
    double n = 0;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
         it.increment(ec)) {
      ++n;
    }
    return ec ? k_nan : n;
  });
  reg.gauge_fn("process_max_fds", "Maximum number of open file descriptors.", [] {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return k_nan;
    return rl.rlim_cur == RLIM_INFINITY ? k_nan : static_cast<double>(rl.rlim_cur);
  });
  // The start time never changes: compute it once, at registration.
  const double start = boot_time_seconds() + stat_field(stat_fields(), 22) / ticks_per_second();
  reg.gauge_fn("process_start_time_seconds",
               "Start time of the process since unix epoch in seconds.", [start] { return start; });
}

}  // namespace shoal::metrics

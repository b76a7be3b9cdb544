// The exposition of a realistic registry passes `promtool check metrics` (parser and linter).
// promtool comes from the Debian `prometheus` package, a declared dependency (tools/install-deps):
// without it the test fails and says so.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/metrics.h"

namespace shoal::metrics {
namespace {

// A temporary directory removed at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shoal-metrics-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string find_promtool() {
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return {};
}

struct check_result {
  int exit_code = -1;
  std::string output;
};

// Runs `promtool check metrics < exposition` and returns its exit code and combined output.
check_result promtool_check(const std::string& exposition) {
  check_result r;
  const std::string promtool = find_promtool();
  if (promtool.empty()) {
    r.output =
        "promtool not found in /usr/bin or /usr/local/bin: install the Debian package "
        "`prometheus` (tools/install-deps)";
    return r;
  }
  temp_dir dir;
  if (dir.path().empty()) {
    r.output = "mkdtemp failed";
    return r;
  }
  const std::string in = dir.path() + "/metrics.txt";
  const std::string out = dir.path() + "/promtool.out";
  std::ofstream(in, std::ios::binary) << exposition;
  // `timeout` bounds the run should promtool ever hang.
  const std::string cmd =
      "timeout 60 " + promtool + " check metrics < '" + in + "' > '" + out + "' 2>&1";
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream o(out);
  std::stringstream ss;
  ss << o.rdbuf();
  r.output = ss.str();
  return r;
}

TEST(MetricsPromtool, RealisticRegistryPassesCheckMetrics) {
  ASSERT_FALSE(find_promtool().empty())
      << "promtool is missing: install the Debian package `prometheus` (tools/install-deps)";
  registry reg;
  register_process_metrics(reg);
  auto& requests =
      reg.counter("shoal_http_requests_total", "HTTP requests served, by route and code.",
                  {"route", "method", "code"});
  requests.with({"/v2/{name}/blobs/{digest}", "GET", "200"}).inc(1234);
  requests.with({"/v2/{name}/manifests/{ref}", "HEAD", "404"}).inc(7);
  requests.with({"weird \"route\"\\ with\nnewline", "GET", "500"}).inc();
  requests.with({"\xe6\x97\xa5\xe6\x9c\xac/caf\xc3\xa9", "GET", "200"}).inc();
  requests.with({"invalid \xff utf8", "GET", "200"}).inc();
  auto& bytes =
      reg.counter("shoal_upstream_bytes_total", "Bytes fetched from upstreams.", {"upstream"});
  bytes.with({"docker-hub"}).inc(1ull << 40);
  reg.gauge("shoal_cache_objects", "Objects in the cache.").with().set(42);
  auto& fill = reg.gauge("shoal_cache_fill_ratio", "Cache fill ratio by tier.", {"tier"});
  fill.with({"nvme"}).set(0.73);
  fill.with({"nan"}).set(std::numeric_limits<double>::quiet_NaN());
  fill.with({"inf"}).set(std::numeric_limits<double>::infinity());
  reg.gauge_fn("shoal_cache_bytes", "Bytes in the cache.\nComputed at scrape time.",
               [] { return 1e12; });
  auto& lat = reg.histogram("shoal_http_request_duration_seconds", "Request latency.", {"route"},
                            default_buckets());
  for (int i = 0; i < 100; ++i) lat.with({"/v2/"}).observe(0.001 * i);
  lat.with({"/metrics"}).observe(0.3);
  auto& sizes = reg.histogram("shoal_blob_size_bytes", "Sizes of blobs served.", {},
                              exponential_buckets(1024, 4, 10));
  sizes.with().observe(5000);
  sizes.with().observe(1e9);
  (void)reg.histogram("shoal_unused_seconds", "Never observed, labelled.", {"x"}, {1});

  const std::string text = reg.expose();
  const check_result r = promtool_check(text);
  EXPECT_EQ(r.exit_code, 0) << "promtool output:\n" << r.output << "\nexposition:\n" << text;
  EXPECT_EQ(r.output, "") << "exposition:\n" << text;
}

// The check above can fail: promtool does reject what it should (guards against a promtool that
// accepts anything, or a broken invocation).
TEST(MetricsPromtool, PromtoolRejectsBadExpositions) {
  ASSERT_FALSE(find_promtool().empty())
      << "promtool is missing: install the Debian package `prometheus` (tools/install-deps)";
  const check_result lint = promtool_check("# HELP x_total X.\n# TYPE x_total gauge\nx_total 1\n");
  EXPECT_NE(lint.exit_code, 0) << lint.output;
  EXPECT_NE(lint.output.find("_total"), std::string::npos) << lint.output;
  const check_result parse = promtool_check("# TYPE y counter\ny{a=\"\xff\"} 1\n");
  EXPECT_NE(parse.exit_code, 0) << parse.output;
}

}  // namespace
}  // namespace shoal::metrics

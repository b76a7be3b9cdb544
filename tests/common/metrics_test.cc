// Metrics: exposition format (golden), escaping, ordering, concurrency, registration rules and
// the process metrics.

#include "common/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace shoal::metrics {
namespace {

TEST(Metrics, CounterAndGaugeExpositionIsExact) {
  registry reg;
  auto& req = reg.counter("shoal_requests_total", "Requests served.", {"route", "code"});
  req.with({"/v2/", "200"}).inc();
  req.with({"/v2/", "200"}).inc(2);
  req.with({"/v2/blobs", "404"}).inc(5);
  auto& up = reg.gauge("shoal_up", "Whether the daemon is up.");
  up.with().set(1);
  auto& g = reg.gauge("shoal_ratio", "A ratio.", {"kind"});
  g.with({"half"}).set(0.5);
  g.with({"big"}).set(1e21);
  g.with({"neg"}).set(-3);
  g.with({"nan"}).set(std::numeric_limits<double>::quiet_NaN());
  g.with({"pinf"}).set(std::numeric_limits<double>::infinity());
  g.with({"ninf"}).set(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(reg.expose(),
            "# HELP shoal_ratio A ratio.\n"
            "# TYPE shoal_ratio gauge\n"
            "shoal_ratio{kind=\"big\"} 1e+21\n"
            "shoal_ratio{kind=\"half\"} 0.5\n"
            "shoal_ratio{kind=\"nan\"} NaN\n"
            "shoal_ratio{kind=\"neg\"} -3\n"
            "shoal_ratio{kind=\"ninf\"} -Inf\n"
            "shoal_ratio{kind=\"pinf\"} +Inf\n"
            "# HELP shoal_requests_total Requests served.\n"
            "# TYPE shoal_requests_total counter\n"
            "shoal_requests_total{route=\"/v2/\",code=\"200\"} 3\n"
            "shoal_requests_total{route=\"/v2/blobs\",code=\"404\"} 5\n"
            "# HELP shoal_up Whether the daemon is up.\n"
            "# TYPE shoal_up gauge\n"
            "shoal_up 1\n");
}

TEST(Metrics, LabelLessMetricsAreExposedAsZeroAndLabelledOnesOnlyOnceUsed) {
  registry reg;
  (void)reg.counter("shoal_a_total", "A.");
  (void)reg.counter("shoal_b_total", "B.", {"x"});
  EXPECT_EQ(reg.expose(),
            "# HELP shoal_a_total A.\n# TYPE shoal_a_total counter\nshoal_a_total 0\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  registry reg;
  auto& h = reg.histogram("shoal_latency_seconds", "Latency.", {"op"}, {0.25, 1, 10});
  auto& get = h.with({"get"});
  for (double v : {0.125, 0.25, 5.0, 100.0, std::numeric_limits<double>::quiet_NaN()})
    get.observe(v);
  h.with({"put"}).observe(0.5);
  EXPECT_EQ(reg.expose(),
            "# HELP shoal_latency_seconds Latency.\n"
            "# TYPE shoal_latency_seconds histogram\n"
            "shoal_latency_seconds_bucket{op=\"get\",le=\"0.25\"} 2\n"
            "shoal_latency_seconds_bucket{op=\"get\",le=\"1\"} 2\n"
            "shoal_latency_seconds_bucket{op=\"get\",le=\"10\"} 3\n"
            "shoal_latency_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"
            "shoal_latency_seconds_sum{op=\"get\"} 105.375\n"
            "shoal_latency_seconds_count{op=\"get\"} 4\n"
            "shoal_latency_seconds_bucket{op=\"put\",le=\"0.25\"} 0\n"
            "shoal_latency_seconds_bucket{op=\"put\",le=\"1\"} 1\n"
            "shoal_latency_seconds_bucket{op=\"put\",le=\"10\"} 1\n"
            "shoal_latency_seconds_bucket{op=\"put\",le=\"+Inf\"} 1\n"
            "shoal_latency_seconds_sum{op=\"put\"} 0.5\n"
            "shoal_latency_seconds_count{op=\"put\"} 1\n");
  const auto s = get.snap();
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{2, 2, 3, 4}));
  EXPECT_EQ(s.count, 4u);
}

TEST(Metrics, HostileLabelValuesAndHelpAreEscaped) {
  registry reg;
  auto& c =
      reg.counter("shoal_x_total", "Help with \\ backslash\nand newline and \"quotes\".", {"v"});
  c.with({"quote\"s"}).inc();
  c.with({"back\\slash"}).inc();
  c.with({"new\nline"}).inc();
  c.with({"\xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9 \xf0\x9f\x90\x9f"}).inc();
  c.with({"bad\xff\xc3(utf8\xed\xa0\x80"}).inc();
  c.with({""}).inc();
  c.with({"}{,=\t"}).inc();
  EXPECT_EQ(reg.expose(),
            "# HELP shoal_x_total Help with \\\\ backslash\\nand newline and \"quotes\".\n"
            "# TYPE shoal_x_total counter\n"
            "shoal_x_total{v=\"\"} 1\n"
            "shoal_x_total{v=\"back\\\\slash\"} 1\n"
            "shoal_x_total{v=\"bad\xef\xbf\xbd\xef\xbf\xbd("
            "utf8\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"} 1\n"
            "shoal_x_total{v=\"new\\nline\"} 1\n"
            "shoal_x_total{v=\"quote\\\"s\"} 1\n"
            "shoal_x_total{v=\"}{,=\t\"} 1\n"
            "shoal_x_total{v=\"\xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9 \xf0\x9f\x90\x9f\"} 1\n");
}

TEST(Metrics, ReferencesAreStableAndRegistrationIsIdempotent) {
  registry reg;
  auto& fam = reg.counter("shoal_stable_total", "S.", {"k"});
  counter& first = fam.with({"a"});
  for (int i = 0; i < 1000; ++i) fam.with({std::to_string(i)}).inc();
  EXPECT_EQ(&fam.with({"a"}), &first);
  const std::vector<std::string> dynamic = {"a"};
  EXPECT_EQ(&fam.with(dynamic), &first);
  EXPECT_EQ(&reg.counter("shoal_stable_total", "S.", {"k"}), &fam);
  auto& h = reg.histogram("shoal_h_seconds", "H.", {}, {1, 2});
  EXPECT_EQ(&reg.histogram("shoal_h_seconds", "H.", {}, {1, 2}), &h);
}

// "t3" or "t3-1000" (built by appending: g++ 12 warns falsely on "literal" + std::string&&).
std::string label(int t, int i = -1) {
  std::string s = "t";
  s += std::to_string(t);
  if (i >= 0) {
    s += '-';
    s += std::to_string(i);
  }
  return s;
}

TEST(Metrics, ConcurrentUpdatesAreExact) {
  registry reg;
  auto& fam = reg.counter("shoal_conc_total", "C.", {"t"});
  auto& shared = fam.with({"shared"});
  auto& g = reg.gauge("shoal_conc_gauge", "G.").with();
  auto& h = reg.histogram("shoal_conc_seconds", "H.", {}, {0.5, 1.5}).with();
  constexpr int k_threads = 8;
  constexpr int k_iters = 50'000;
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    for (int i = 0; i < 2000 && !stop.load(); ++i) {
      const std::string text = reg.expose();
      ASSERT_NE(text.find("shoal_conc_total"), std::string::npos);
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < k_threads; ++t) {
    workers.emplace_back([&, t] {
      auto& own = fam.with({label(t)});
      for (int i = 0; i < k_iters; ++i) {
        shared.inc();
        own.inc(2);
        g.inc();
        g.dec(0.5);
        h.observe(1.0);
        if (i % 1000 == 0) fam.with({label(t, i)}).inc();
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  scraper.join();
  EXPECT_EQ(shared.value(), std::uint64_t{k_threads} * k_iters);
  for (int t = 0; t < k_threads; ++t) {
    EXPECT_EQ(fam.with({label(t)}).value(), 2u * k_iters);
  }
  EXPECT_EQ(g.value(), 0.5 * k_threads * k_iters);
  const auto s = h.snap();
  EXPECT_EQ(s.count, std::uint64_t{k_threads} * k_iters);
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{0, s.count, s.count}));
  EXPECT_EQ(s.sum, 1.0 * k_threads * k_iters);
}

TEST(Metrics, CallbacksRunAtScrapeTimeAndAFailingOneDropsOnlyItself) {
  registry reg;
  double bytes = 10;
  reg.gauge_fn("shoal_cache_bytes", "Bytes.", [&] { return bytes; });
  reg.counter_fn("shoal_evictions_total", "Evictions.", [] { return 7.0; });
  reg.gauge_fn("shoal_broken", "Throws.", []() -> double { throw std::runtime_error("no"); });
  bytes = 42;
  EXPECT_EQ(
      reg.expose(),
      "# HELP shoal_cache_bytes Bytes.\n# TYPE shoal_cache_bytes gauge\nshoal_cache_bytes 42\n"
      "# HELP shoal_evictions_total Evictions.\n# TYPE shoal_evictions_total counter\n"
      "shoal_evictions_total 7\n");
}

TEST(Metrics, ScopedTimerObservesOnce) {
  registry reg;
  auto& h = reg.histogram("shoal_op_seconds", "Op.", {}, exponential_buckets(0.001, 10, 5)).with();
  {
    scoped_timer t(h);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto s = h.snap();
  EXPECT_EQ(s.count, 1u);
  EXPECT_GE(s.sum, 0.002);
  EXPECT_LT(s.sum, 5.0);
}

TEST(Metrics, BucketHelpersAndNameRules) {
  EXPECT_EQ(exponential_buckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(linear_buckets(0, 5, 3), (std::vector<double>{0, 5, 10}));
  EXPECT_EQ(default_buckets().size(), 11u);
  EXPECT_TRUE(valid_metric_name("shoal_http_requests_total"));
  EXPECT_TRUE(valid_metric_name("_x"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_FALSE(valid_metric_name("9x"));
  EXPECT_FALSE(valid_metric_name("Shoal"));
  EXPECT_FALSE(valid_metric_name("a:b"));
  EXPECT_FALSE(valid_metric_name("a-b"));
  EXPECT_FALSE(valid_metric_name("a b"));
  EXPECT_TRUE(valid_label_name("route"));
  EXPECT_FALSE(valid_label_name("__name__"));
}

using MetricsDeathTest = ::testing::Test;

TEST_F(MetricsDeathTest, RegistrationMistakesAbortWithTheMetricName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.counter("Bad-Name_total", "x");
      },
      "metric name \"Bad-Name_total\" is not lower snake_case");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.counter("shoal_requests", "x");
      },
      "counter shoal_requests must end in _total");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_things_total", "x");
      },
      "gauge shoal_things_total must not end in _total");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_peers_count", "x");
      },
      "must not end in _count");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_g", "");
      },
      "metric shoal_g has no help text");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.histogram("shoal_h", "x", {"le"}, {1});
      },
      "label name \"le\" is reserved");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_g", "x", {"__x"});
      },
      "label name \"__x\"");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_g", "x", {"a", "a"});
      },
      "label \"a\" given twice");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.histogram("shoal_h", "x", {}, {2, 1});
      },
      "strictly increasing");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.histogram("shoal_h", "x", {}, {});
      },
      "has no buckets");
  EXPECT_DEATH(
      {
        registry r;
        r.gauge("shoal_g", "x", {"a"}).with({"1", "2"});
      },
      "metric shoal_g has 1 labels, with\\(\\) got 2 values");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_g", "x", {"a"});
        (void)r.gauge("shoal_g", "x", {"b"});
      },
      "metric shoal_g registered twice");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.gauge("shoal_g", "x");
        (void)r.counter("shoal_g_total", "x");
        r.gauge_fn("shoal_g", "x", [] { return 1.0; });
      },
      "metric shoal_g registered twice");
  EXPECT_DEATH(
      {
        registry r;
        (void)r.histogram("shoal_h", "x", {}, {1});
        (void)r.histogram("shoal_h", "x", {}, {2});
      },
      "registered twice with different buckets");
}

TEST(Metrics, ProcessMetricsReadProc) {
  registry reg;
  register_process_metrics(reg);
  const std::string text = reg.expose();
  auto value = [&](const std::string& name) {
    const std::size_t pos = text.find("\n" + name + " ");
    EXPECT_NE(pos, std::string::npos) << name << " missing:\n" << text;
    if (pos == std::string::npos) return -1.0;
    return std::stod(text.substr(pos + name.size() + 2));
  };
  EXPECT_GE(value("process_cpu_seconds_total"), 0.0);
  EXPECT_GT(value("process_resident_memory_bytes"), 1024.0 * 1024);
  EXPECT_GT(value("process_virtual_memory_bytes"), value("process_resident_memory_bytes"));
  EXPECT_GE(value("process_open_fds"), 3.0);
  EXPECT_GE(value("process_max_fds"), value("process_open_fds"));
  const double now = static_cast<double>(std::time(nullptr));
  const double start = value("process_start_time_seconds");
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
}

}  // namespace
}  // namespace shoal::metrics

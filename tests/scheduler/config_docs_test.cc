// docs/config/scheduler.md is what `shoal-scheduler --print-config-docs` prints: regenerate it
// with `build/<dir>/scheduler/shoal-scheduler --print-config-docs > docs/config/scheduler.md`.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/config.h"
#include "scheduler/config.h"

namespace shoal::scheduler {
namespace {

TEST(ConfigDocs, CommittedReferenceIsUpToDate) {
  std::ifstream f(std::string(SHOAL_SOURCE_DIR) + "/docs/config/scheduler.md");
  ASSERT_TRUE(f) << "docs/config/scheduler.md is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  auto want = config::to_markdown<scheduler_config>("shoal-scheduler");
  EXPECT_EQ(ss.str(), want) << "docs/config/scheduler.md is stale: regenerate it with "
                               "shoal-scheduler --print-config-docs > docs/config/scheduler.md";
}

TEST(ConfigDocs, DefaultsValidateAndBadValuesAreRefused) {
  scheduler_config c;
  EXPECT_TRUE(config::validate(c));
  for (const char* bad :
       {"extender: {mode: medium}", "extender: {max_missing: lots}",
        "placement: {cost: {model: quantum}}", "nodes: {unhealthy_after: 10m, drop_after: 5m}",
        "placement: {cost: {upstream_bandwidth: 0}}"}) {
    scheduler_config x;
    EXPECT_FALSE(config::load_string(bad, "test.yaml", x)) << bad;
  }
  scheduler_config ok;
  ASSERT_TRUE(
      config::load_string("extender: {mode: hard, max_missing: 2GiB}\nresolver: {registry_proxy: "
                          "\"http://rp:5050\"}",
                          "test.yaml", ok));
  EXPECT_EQ(ok.extender.mode, "hard");
  EXPECT_EQ(ok.resolver.registry_proxy, "http://rp:5050");
}

}  // namespace
}  // namespace shoal::scheduler

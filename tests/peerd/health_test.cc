// The node's health hook (peerd/include/peerd/health.h): a command's exit status and output, its
// timeout, a health file's first line and age, and the worse verdict winning.
#include "peerd/health.h"

#include <sys/stat.h>
#include <utime.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace shoal::peerd {
namespace {

using std::chrono::milliseconds;

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

TEST(HealthCommand, ExitStatusGivesTheVerdict) {
  EXPECT_EQ(run_health_command(sh("exit 0"), milliseconds(5000)).state, "ok");
  auto d =
      run_health_command(sh("echo; echo '  GPU 3: ECC errors \x01'; exit 1"), milliseconds(5000));
  EXPECT_EQ(d.state, "degraded");
  ASSERT_EQ(d.reasons.size(), 1u);
  EXPECT_NE(d.reasons[0].find("exited 1: GPU 3: ECC errors \\x01"), std::string::npos)
      << d.reasons[0];
  auto f = run_health_command(sh("echo 'GPU 0 fell off the bus' >&2; exit 7"), milliseconds(5000));
  EXPECT_EQ(f.state, "failing");
  EXPECT_NE(f.reasons[0].find("exited 7: GPU 0 fell off the bus"), std::string::npos);
  auto k = run_health_command(sh("kill -9 $$"), milliseconds(5000));
  EXPECT_EQ(k.state, "failing");
  EXPECT_NE(k.reasons[0].find("signal 9"), std::string::npos) << k.reasons[0];
  auto missing = run_health_command({"/nonexistent/check"}, milliseconds(5000));
  EXPECT_EQ(missing.state, "failing");
  EXPECT_NE(missing.reasons[0].find("cannot run"), std::string::npos) << missing.reasons[0];
}

TEST(HealthCommand, AHangingCommandIsKilledAndFailing) {
  auto t0 = std::chrono::steady_clock::now();
  auto v = run_health_command(sh("sleep 30"), milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(v.state, "failing");
  EXPECT_NE(v.reasons[0].find("did not finish within 300 ms"), std::string::npos) << v.reasons[0];
  // Endless output is bounded and the command still ends at the timeout.
  auto y = run_health_command(sh("yes"), milliseconds(300));
  EXPECT_EQ(y.state, "failing");
}

TEST(HealthFile, FirstLineAndAge) {
  auto dir =
      std::filesystem::temp_directory_path() / ("shoal-health-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "health").string();
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  EXPECT_EQ(read_health_file(path, std::chrono::seconds(60)).state, "degraded");  // missing
  write("ok\n");
  EXPECT_EQ(read_health_file(path, std::chrono::seconds(60)).state, "ok");
  write("failing: GPU 2 XID 79\nmore\n");
  auto f = read_health_file(path, std::chrono::seconds(60));
  EXPECT_EQ(f.state, "failing");
  EXPECT_NE(f.reasons[0].find("GPU 2 XID 79"), std::string::npos);
  write("degraded\n");
  EXPECT_EQ(read_health_file(path, std::chrono::seconds(60)).state, "degraded");
  write("fine\n");
  auto odd = read_health_file(path, std::chrono::seconds(60));
  EXPECT_EQ(odd.state, "degraded");
  EXPECT_NE(odd.reasons[0].find("not ok, degraded or failing"), std::string::npos);
  write("ok\n");
  struct utimbuf old {
    0, std::time(nullptr) - 600
  };
  ::utime(path.c_str(), &old);
  auto stale = read_health_file(path, std::chrono::seconds(60));
  EXPECT_EQ(stale.state, "degraded");
  EXPECT_NE(stale.reasons[0].find("older than 60s"), std::string::npos);
  EXPECT_EQ(read_health_file(path, std::chrono::seconds(0)).state, "ok");  // no age limit
  std::filesystem::remove_all(dir);
}

TEST(Health, TheWorseVerdictWins) {
  health_verdict a{"degraded", {"x"}};
  merge_health(a, {"failing", {"y"}});
  EXPECT_EQ(a.state, "failing");
  EXPECT_EQ(a.reasons.size(), 2u);
  merge_health(a, {"ok", {}});
  EXPECT_EQ(a.state, "failing");
}

TEST(HealthMonitor, RunsTheFirstCheckAtStart) {
  node_config c;
  c.health_command = sh("echo nvlink down; exit 2");
  health_monitor m(c);
  m.start();
  auto v = m.current();
  EXPECT_EQ(v.state, "failing");
  ASSERT_FALSE(v.reasons.empty());
  EXPECT_NE(v.reasons[0].find("nvlink down"), std::string::npos);
  m.stop();
  node_config nothing;  // the monitor keeps a reference: the config outlives it
  health_monitor none(nothing);
  none.start();
  EXPECT_EQ(none.current().state, "ok");
}

}  // namespace
}  // namespace shoal::peerd

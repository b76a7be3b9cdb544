// The real command runner: output capture, exit codes, timeouts, missing tools, output caps.

#include "netsetup/command_runner.h"

#include <gtest/gtest.h>

#include "netsetup/errc.h"

namespace shoal::netsetup {
namespace {

using namespace std::chrono_literals;

TEST(NetsetupProcessRunner, CapturesStdoutStderrAndExitCode) {
  process_runner r;
  auto res = r.run({"sh", "-c", "echo out; echo err >&2; exit 3"}, 5s);
  ASSERT_TRUE(res) << res.error().message;
  EXPECT_EQ(res->exit_code, 3);
  EXPECT_EQ(res->out, "out\n");
  EXPECT_EQ(res->err, "err\n");
  auto ok = r.run({"true"}, 5s);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->exit_code, 0);
}

TEST(NetsetupProcessRunner, StdinIsEmptyAndArgumentsAreNotParsedByAShell) {
  process_runner r;
  auto res = r.run({"cat"}, 5s);  // would hang on an inherited terminal
  ASSERT_TRUE(res);
  EXPECT_EQ(res->out, "");
  auto echo = r.run({"echo", "a b", "$HOME", "'q'"}, 5s);
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->out, "a b $HOME 'q'\n");
}

TEST(NetsetupProcessRunner, MissingToolIsAnErrorSayingSo) {
  process_runner r;
  auto res = r.run({"shoal-no-such-tool", "-a"}, 5s);
  ASSERT_FALSE(res);
  EXPECT_EQ(res.error().code, make_error_code(errc::command_failed));
  EXPECT_NE(res.error().message.find("shoal-no-such-tool -a: cannot run"), std::string::npos)
      << res.error().message;
  EXPECT_FALSE(r.run({}, 5s));
}

TEST(NetsetupProcessRunner, AHangingToolIsKilledAtTheDeadline) {
  process_runner r;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = r.run({"sleep", "30"}, 300ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(res);
  EXPECT_NE(res.error().message.find("timed out after 300 ms"), std::string::npos);
  EXPECT_LT(took, 5s);
  // A tool that closes its output but keeps running is also bounded.
  auto res2 = r.run({"sh", "-c", "exec >/dev/null 2>&1; sleep 30"}, 300ms);
  ASSERT_FALSE(res2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(NetsetupProcessRunner, OutputIsCapped) {
  process_runner r;
  auto res = r.run({"sh", "-c", "head -c 3000000 /dev/zero"}, 10s);
  ASSERT_TRUE(res) << res.error().message;
  EXPECT_EQ(res->out.size(), 1u << 20);
  EXPECT_EQ(res->exit_code, 0);
}

}  // namespace
}  // namespace shoal::netsetup

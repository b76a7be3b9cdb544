// MTU and link state applied to real veth devices in a network namespace (label: integration).
//
// The test creates its own named namespace (shoal-netsetup-<pid>-<nonce>), and a child process
// enters it with a private mount namespace in which sysfs is mounted on a temp dir: that sysfs
// shows the namespace's devices, so discovery, plan and apply run exactly as on a node, with the
// real `ip`. The parent bounds the child in time, and deletes the namespace on every exit path
// (a guard object); namespaces left by a killed run are swept by the next one.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "netsetup/command_runner.h"
#include "netsetup/discover.h"
#include "netsetup/plan.h"
#include "netsetup/validate.h"

namespace shoal::netsetup {
namespace {

using namespace std::chrono_literals;
constexpr const char* prefix = "shoal-netsetup-";

command_result sh(const std::vector<std::string>& argv) {
  process_runner r;
  auto res = r.run(argv, 10s);
  if (!res) return command_result{-1, {}, res.error().message};
  return *res;
}

// Deletes namespaces of earlier runs whose process is gone (a run killed by ctest's timeout).
void sweep_stale() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename();
    if (!name.starts_with(prefix)) continue;
    const std::string rest = name.substr(std::string(prefix).size());
    const pid_t pid = static_cast<pid_t>(std::atoi(rest.c_str()));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) sh({"ip", "netns", "del", name});
  }
}

class netns_guard {
 public:
  explicit netns_guard(std::string name) : name_(std::move(name)) {}
  ~netns_guard() {
    if (created_) sh({"ip", "netns", "del", name_});
  }
  bool create(std::string& err) {
    auto r = sh({"ip", "netns", "add", name_});
    created_ = r.exit_code == 0;
    err = r.err;
    return created_;
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  bool created_ = false;
};

// Runs in the child, inside the namespace: returns the report the parent checks.
nlohmann::json child_body(const std::string& ns, const std::string& tmp) {
  nlohmann::json rep;
  auto step_fail = [&](const std::string& what) {
    rep["error"] = what;
    return rep;
  };
  if (::unshare(CLONE_NEWNS) != 0) return step_fail("unshare(CLONE_NEWNS) failed");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return step_fail("make / private failed");
  }
  const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) return step_fail("setns failed");
  ::close(fd);
  std::filesystem::create_directories(tmp + "/sys");
  if (::mount("sysfs", (tmp + "/sys").c_str(), "sysfs", 0, nullptr) != 0) {
    return step_fail("mount sysfs failed");
  }
  auto add = sh({"ip", "link", "add", "vA", "type", "veth", "peer", "name", "vB"});
  if (add.exit_code != 0) return step_fail("ip link add: " + add.err);

  process_runner runner;
  const sysfs fs(tmp);
  policy pol;
  pol.interfaces = {"vA", "vB"};
  pol.mtu = 9000;
  discover_options o;
  o.node_name = "veth-node";
  o.extra_netdevs = pol.interfaces;
  auto inv = discover(fs, runner, o);
  if (!inv) return step_fail("discover: " + inv.error().message);
  const netdev_info* a = inv->find_netdev("vA");
  if (a == nullptr) return step_fail("vA not discovered");
  rep["before"] = {{"mtu", a->mtu}, {"admin_up", a->admin_up}, {"operstate", a->operstate}};
  rep["before_checks"] = to_json(validate_node(*inv, pol));

  plan p = make_plan(*inv, pol);
  rep["plan"] = to_json(p);
  apply_options ao;
  ao.journal_path = tmp + "/journal.jsonl";
  auto done = apply(p, fs, runner, ao);
  if (!done) return step_fail("apply: " + done.error().message);
  rep["apply_ok"] = done->ok;
  rep["apply_failure"] = done->failure;
  rep["changed"] = done->changed;

  // Carrier follows IFF_UP asynchronously: wait (bounded) until both ends report "up".
  auto after = discover(fs, runner, o);
  for (int i = 0; i < 40 && after; ++i) {
    const netdev_info* x = after->find_netdev("vA");
    const netdev_info* y = after->find_netdev("vB");
    if (x && y && x->operstate == "up" && y->operstate == "up") break;
    ::usleep(50000);
    after = discover(fs, runner, o);
  }
  if (!after) return step_fail("rediscover: " + after.error().message);
  nlohmann::json devs;
  for (const char* n : {"vA", "vB"}) {
    const netdev_info* d = after->find_netdev(n);
    if (d == nullptr) return step_fail(std::string(n) + " gone");
    devs[n] = {{"mtu", d->mtu}, {"admin_up", d->admin_up}, {"operstate", d->operstate}};
  }
  rep["after"] = devs;
  // The kernel's own view, not ours.
  auto show = sh({"ip", "-j", "link", "show", "dev", "vA"});
  rep["ip_show"] = nlohmann::json::parse(show.out, nullptr, false);
  rep["after_checks"] = to_json(validate_node(*after, pol));
  plan again = make_plan(*after, pol);
  rep["replan_ops"] = again.ops.size();
  auto second = apply(again, fs, runner, ao);
  rep["second_changed"] = second ? second->changed : -1;
  std::ifstream j(ao.journal_path);
  int lines = 0;
  for (std::string l; std::getline(j, l);) ++lines;
  rep["journal_lines"] = lines;
  return rep;
}

std::string status_of(const nlohmann::json& checks, const std::string& name,
                      const std::string& subject) {
  for (const auto& c : checks) {
    if (c["name"] == name && c["subject"] == subject) return c["status"];
  }
  return "missing";
}

TEST(NetsetupVeth, MtuAndLinkStateAppliedToRealDevices) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces";
  sweep_stale();
  std::random_device rd;
  char nonce[16];
  std::snprintf(nonce, sizeof(nonce), "%08x", rd());
  netns_guard ns(std::string(prefix) + std::to_string(::getpid()) + "-" + nonce);
  std::string err;
  ASSERT_TRUE(ns.create(err)) << "ip netns add " << ns.name() << ": " << err;

  std::string tmp = "/tmp/shoal-netsetup-veth-XXXXXX";
  ASSERT_NE(::mkdtemp(tmp.data()), nullptr);
  struct cleanup {
    std::string dir;
    ~cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } tmp_guard{tmp};

  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipefd[0]);
    ::alarm(30);  // the child never outlives a stuck step
    std::string out = child_body(ns.name(), tmp).dump();
    std::size_t off = 0;
    while (off < out.size()) {
      ssize_t n = ::write(pipefd[1], out.data() + off, out.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(pipefd[1]);
  std::string text;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + 40s;
  ::fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  for (;;) {
    ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
    ::usleep(10000);
  }
  ::close(pipefd[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "child killed (timeout or crash)";
  auto rep = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(rep.is_discarded()) << "child report: " << text;
  ASSERT_FALSE(rep.contains("error")) << rep["error"];

  EXPECT_EQ(rep["before"]["mtu"], 1500);
  EXPECT_EQ(rep["before"]["admin_up"], false);
  EXPECT_EQ(status_of(rep["before_checks"], "link.mtu", "vA"), "fail");
  EXPECT_EQ(status_of(rep["before_checks"], "link.up", "vA"), "fail");
  std::vector<std::string> whats;
  for (const auto& op : rep["plan"]["ops"]) {
    whats.push_back(op["subject"].get<std::string>() + ": " + op["what"].get<std::string>());
  }
  EXPECT_EQ(whats, (std::vector<std::string>{"vA: set MTU 9000", "vA: bring link up",
                                             "vB: set MTU 9000", "vB: bring link up"}));
  EXPECT_FALSE(rep["plan"]["problems"].empty());  // a veth has no DCB and no ECN knobs
  EXPECT_EQ(rep["apply_ok"], true) << rep["apply_failure"];
  EXPECT_EQ(rep["changed"], 4);
  for (const char* n : {"vA", "vB"}) {
    EXPECT_EQ(rep["after"][n]["mtu"], 9000) << n;
    EXPECT_EQ(rep["after"][n]["admin_up"], true) << n;
    EXPECT_EQ(rep["after"][n]["operstate"], "up") << n;
    EXPECT_EQ(status_of(rep["after_checks"], "link.mtu", n), "pass") << n;
    EXPECT_EQ(status_of(rep["after_checks"], "link.up", n), "pass") << n;
  }
  ASSERT_TRUE(rep["ip_show"].is_array()) << rep["ip_show"];
  EXPECT_EQ(rep["ip_show"][0]["mtu"], 9000);
  EXPECT_EQ(rep["replan_ops"], 0);
  EXPECT_EQ(rep["second_changed"], 0);
  EXPECT_EQ(rep["journal_lines"], 4);
}

}  // namespace
}  // namespace shoal::netsetup

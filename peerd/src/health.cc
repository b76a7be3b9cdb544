// The node's health hook (health.h).
#include "peerd/health.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/fd.h"
#include "common/log.h"
#include "common/text.h"
#include "common/thread_name.h"

extern char** environ;

namespace shoal::peerd {

namespace {

constexpr std::size_t max_output = 4096;

int rank_of(const std::string& state) {
  return state == "failing" ? 2 : state == "degraded" ? 1 : 0;
}

// The first non-empty line of `out`, trimmed, without quotes, at most 200 characters.
std::string first_line(const std::string& out) {
  std::size_t start = 0;
  while (start < out.size()) {
    auto nl = out.find('\n', start);
    auto line =
        trim(std::string_view(out).substr(start, nl == std::string::npos ? nl : nl - start));
    if (!line.empty()) {
      auto q = quote_excerpt(line, 200);
      return q.size() >= 2 ? q.substr(1, q.size() - 2) : q;
    }
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return {};
}

}  // namespace

void merge_health(health_verdict& a, const health_verdict& b) {
  if (rank_of(b.state) > rank_of(a.state)) a.state = b.state;
  a.reasons.insert(a.reasons.end(), b.reasons.begin(), b.reasons.end());
}

health_verdict run_health_command(const std::vector<std::string>& argv,
                                  std::chrono::milliseconds timeout) {
  health_verdict v;
  if (argv.empty()) return v;
  std::string name = std::filesystem::path(argv[0]).filename().string();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    v.state = "degraded";
    v.reasons.push_back("health command " + name + ": pipe: " + std::strerror(errno));
    return v;
  }
  unique_fd rd(fds[0]), wr(fds[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  wr.reset();
  if (rc != 0) {
    v.state = "failing";
    v.reasons.push_back("health command " + name + " cannot run: " + std::strerror(rc));
    return v;
  }
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{rd.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[1024];
    ssize_t got = ::read(rd.get(), buf, sizeof buf);
    if (got <= 0) break;  // the command closed its output (it is ending)
    if (out.size() < max_output)
      out.append(buf,
                 std::min<std::size_t>(static_cast<std::size_t>(got), max_output - out.size()));
  }
  int status = 0;
  if (timed_out) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    v.state = "failing";
    v.reasons.push_back("health command " + name + " did not finish within " +
                        std::to_string(timeout.count()) + " ms");
    return v;
  }
  // Output closed: the command is ending; wait for it (bounded by the same deadline).
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      v.state = "failing";
      v.reasons.push_back("health command " + name + " did not exit within " +
                          std::to_string(timeout.count()) + " ms");
      return v;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string why = first_line(out);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return v;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {
    v.state = "degraded";
  } else {
    v.state = "failing";
  }
  std::string how = WIFEXITED(status) ? "exited " + std::to_string(WEXITSTATUS(status))
                                      : "was killed by signal " + std::to_string(WTERMSIG(status));
  v.reasons.push_back("health command " + name + " " + how + (why.empty() ? "" : ": " + why));
  return v;
}

health_verdict read_health_file(const std::string& path, std::chrono::seconds max_age) {
  health_verdict v;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    v.state = "degraded";
    v.reasons.push_back("health file " + path + ": " + std::strerror(errno));
    return v;
  }
  auto age = std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime);
  if (max_age.count() > 0 && age > max_age) {
    v.state = "degraded";
    v.reasons.push_back("health file " + path + " is older than " +
                        std::to_string(max_age.count()) + "s (is its writer alive?)");
    return v;
  }
  std::ifstream f(path, std::ios::binary);
  std::string text(max_output, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(f.gcount()));
  std::string line = first_line(text);
  auto colon = line.find(':');
  std::string word = trim(line.substr(0, colon));
  std::string why = colon == std::string::npos ? "" : trim(line.substr(colon + 1));
  if (word == "ok") return v;
  if (word == "degraded" || word == "failing") {
    v.state = word;
    v.reasons.push_back("health file " + path + ": " + (why.empty() ? word : why));
    return v;
  }
  v.state = "degraded";
  v.reasons.push_back("health file " + path + " says " + quote_excerpt(line, 80) +
                      ", not ok, degraded or failing");
  return v;
}

void health_monitor::check_once() {
  health_verdict v;
  if (!cfg_.health_command.empty()) {
    merge_health(v, run_health_command(cfg_.health_command,
                                       std::chrono::duration_cast<std::chrono::milliseconds>(
                                           cfg_.health_timeout.get())));
  }
  if (!cfg_.health_file.empty()) {
    merge_health(
        v, read_health_file(cfg_.health_file, std::chrono::duration_cast<std::chrono::seconds>(
                                                  cfg_.health_file_max_age.get())));
  }
  std::lock_guard lk(mu_);
  if (v.state != now_.state) {
    log::warn("node health changed", log::kv("from", now_.state), log::kv("to", v.state),
              log::kv("reasons", v.reasons.empty() ? std::string() : v.reasons.front()));
  }
  now_ = std::move(v);
}

void health_monitor::start() {
  if (cfg_.health_command.empty() && cfg_.health_file.empty()) return;
  check_once();
  thread_ = std::thread([this] {
    name_this_thread("health-check");
    std::unique_lock lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, cfg_.health_interval.get(), [&] { return stop_; });
      if (stop_) break;
      lk.unlock();
      check_once();
      lk.lock();
    }
  });
}

void health_monitor::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

health_verdict health_monitor::current() const {
  std::lock_guard lk(mu_);
  return now_;
}

}  // namespace shoal::peerd

#include "netsetup/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd.h"
#include "netsetup/errc.h"

extern char** environ;

namespace shoal::netsetup {
namespace {

constexpr std::size_t max_stdout = 1 << 20;
constexpr std::size_t max_stderr = 64 << 10;

error cmd_error(const std::vector<std::string>& argv, std::string what) {
  return error{make_error_code(errc::command_failed), join_argv(argv) + ": " + what};
}

// Reaps `pid`, waiting at most until `deadline`; kills it when the deadline passes.
int reap(pid_t pid, std::chrono::steady_clock::time_point deadline, bool& timed_out) {
  int wstatus = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &wstatus, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    ::usleep(2000);
  }
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return -1;
}

}  // namespace

std::string join_argv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

result<command_result> process_runner::run(const std::vector<std::string>& argv,
                                           std::chrono::milliseconds timeout) {
  if (argv.empty() || argv[0].empty()) {
    return fail(make_error_code(errc::bad_request), "run: empty command");
  }
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fail(cmd_error(argv, "pipe failed"));
  unique_fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return fail(cmd_error(argv, "pipe failed"));
  unique_fd err_r(err_pipe[0]), err_w(err_pipe[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child must not inherit a blocked SIGKILL-irrelevant mask from test harnesses; reset
  // signal dispositions so a tool dies on SIGPIPE like it would from a shell.
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &def);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, cargv[0], &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return fail(cmd_error(argv, std::string("cannot run: ") + std::strerror(rc)));
  out_w.reset();
  err_w.reset();

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  command_result res;
  bool out_open = true, err_open = true, timed_out = false;
  char buf[8192];
  while (out_open || err_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2];
    nfds_t n = 0;
    if (out_open) fds[n++] = {out_r.get(), POLLIN, 0};
    if (err_open) fds[n++] = {err_r.get(), POLLIN, 0};
    int pr = ::poll(fds, n, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (nfds_t i = 0; i < n; ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof(buf));
      const bool is_out = fds[i].fd == out_r.get();
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        (is_out ? out_open : err_open) = false;
        continue;
      }
      std::string& dst = is_out ? res.out : res.err;
      const std::size_t cap = is_out ? max_stdout : max_stderr;
      if (dst.size() < cap) {
        dst.append(buf, std::min(static_cast<std::size_t>(got), cap - dst.size()));
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  bool reap_timeout = false;
  // After the pipes close the child is exiting; give it a short grace period to be reaped.
  auto reap_deadline =
      timed_out
          ? std::chrono::steady_clock::now()
          : std::max(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
  res.exit_code = reap(pid, reap_deadline, reap_timeout);
  if (timed_out || reap_timeout) {
    return fail(
        error{make_error_code(errc::command_failed),
              join_argv(argv) + ": timed out after " + std::to_string(timeout.count()) + " ms"});
  }
  return res;
}

}  // namespace shoal::netsetup

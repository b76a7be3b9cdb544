#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/json_text.h"
#include "json_text.h"
#include "netsetup/errc.h"
#include "netsetup/plan.h"
#include "netsetup/tool_output.h"

namespace shoal::netsetup {
namespace {

std::string now_iso() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Runs a tool whose output verification needs; failure to run or a non-zero exit is an error.
result<std::string> run_tool(command_runner& runner, const std::vector<std::string>& argv,
                             std::chrono::milliseconds timeout) {
  auto r = runner.run(argv, timeout);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) {
    std::string e = r->err.substr(0, r->err.find('\n'));
    return fail(
        make_error_code(errc::command_failed),
        join_argv(argv) + ": exit " + std::to_string(r->exit_code) + (e.empty() ? "" : ": " + e));
  }
  return std::move(r->out);
}

std::string expected_text(const verify_spec& v) {
  switch (v.k) {
    case verify_spec::kind::file_int:
    case verify_spec::kind::traffic_class:
      return std::to_string(v.expect);
    case verify_spec::kind::file_text:
    case verify_spec::kind::trust:
      return v.text;
    case verify_spec::kind::link_up:
      return "up";
    case verify_spec::kind::pfc: {
      // Appending in steps: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string.
      std::string s = "PFC on ";
      s += std::to_string(v.expect);
      s += " only";
      return s;
    }
    case verify_spec::kind::dscp_map: {
      std::string s;
      for (auto [d, p] : v.dscp)
        s += std::string(s.empty() ? "" : " ") + std::to_string(d) + ":" + std::to_string(p);
      return s;
    }
    case verify_spec::kind::pause_off:
      return "rx off tx off";
  }
  return {};
}

class journal {
 public:
  status open(const std::string& path) {
    if (path.empty()) return {};
    std::error_code ec;
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    fd_.reset(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
    if (!fd_) return fail_errno(errno, "open journal " + path);
    path_ = path;
    return {};
  }
  status append(nlohmann::json record) {
    if (!fd_) return {};
    detail::make_printable(record);
    std::string line = json_text(record) + "\n";
    std::size_t off = 0;
    while (off < line.size()) {
      ssize_t n = ::write(fd_.get(), line.data() + off, line.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail_errno(errno, "write journal " + path_);
      }
      off += static_cast<std::size_t>(n);
    }
    // The journal is the record of what changed on the node; make it survive a crash right
    // after the change.
    if (::fdatasync(fd_.get()) != 0 && errno != EINVAL) {
      return fail_errno(errno, "sync journal " + path_);
    }
    return {};
  }

 private:
  unique_fd fd_;
  std::string path_;
};

}  // namespace

result<bool> check_state(const verify_spec& v, const sysfs& fs, command_runner& runner,
                         std::chrono::milliseconds timeout, std::string& actual) {
  switch (v.k) {
    case verify_spec::kind::file_int: {
      auto x = fs.read_int(v.path);
      if (!x) return fail(x.error());
      actual = std::to_string(*x);
      return *x == v.expect;
    }
    case verify_spec::kind::file_text: {
      auto x = fs.read(v.path);
      if (!x) return fail(x.error());
      actual = *x;
      return *x == v.text;
    }
    case verify_spec::kind::traffic_class: {
      auto x = fs.read(v.path);
      if (!x) return fail(x.error());
      actual = *x;
      auto n = parse_traffic_class(*x, fs.path(v.path));
      if (!n) return fail(n.error());
      return *n && **n == v.expect;
    }
    case verify_spec::kind::link_up: {
      const std::string p = "/sys/class/net/" + v.netdev + "/flags";
      auto t = fs.read(p);
      if (!t) return fail(t.error());
      auto f = parse_hex(*t, fs.path(p));
      if (!f) return fail(f.error());
      actual = (*f & 1) ? "up" : "down";
      return (*f & 1) != 0;
    }
    case verify_spec::kind::pfc: {
      std::vector<std::string> argv = {"dcb", "-j", "pfc", "show", "dev", v.netdev};
      auto out = run_tool(runner, argv, timeout);
      if (!out) return fail(out.error());
      auto p = parse_dcb_pfc(*out, join_argv(argv));
      if (!p) return fail(p.error());
      actual.clear();
      bool ok = true;
      for (int i = 0; i < 8; ++i) {
        const bool on = p->enabled[static_cast<std::size_t>(i)];
        if (on) actual += (actual.empty() ? "PFC on " : ",") + std::to_string(i);
        ok = ok && on == (i == v.expect);
      }
      if (actual.empty()) actual = "PFC off";
      return ok;
    }
    case verify_spec::kind::dscp_map: {
      std::vector<std::string> argv = {"dcb", "-j", "app", "show", "dev", v.netdev};
      auto out = run_tool(runner, argv, timeout);
      if (!out) return fail(out.error());
      auto a = parse_dcb_app(*out, join_argv(argv));
      if (!a) return fail(a.error());
      actual.clear();
      for (auto [d, p] : a->dscp_prio) {
        actual +=
            std::string(actual.empty() ? "" : " ") + std::to_string(d) + ":" + std::to_string(p);
      }
      for (auto [d, p] : v.dscp) {
        int matches = 0, others = 0;
        for (auto [hd, hp] : a->dscp_prio) {
          if (hd == d) (hp == p ? matches : others)++;
        }
        if (matches != 1 || others != 0) return false;
      }
      return true;
    }
    case verify_spec::kind::trust: {
      std::vector<std::string> argv = {"dcb", "-j", "apptrust", "show", "dev", v.netdev};
      auto out = run_tool(runner, argv, timeout);
      if (!out) return fail(out.error());
      auto order = parse_dcb_apptrust(*out, join_argv(argv));
      if (!order) return fail(order.error());
      actual.clear();
      for (const auto& o : *order) actual += std::string(actual.empty() ? "" : ",") + o;
      return actual == v.text;
    }
    case verify_spec::kind::pause_off: {
      std::vector<std::string> argv = {"ethtool", "-a", v.netdev};
      auto out = run_tool(runner, argv, timeout);
      if (!out) return fail(out.error());
      auto p = parse_ethtool_pause(*out, join_argv(argv));
      if (!p) return fail(p.error());
      actual = std::string("rx ") + (p->rx ? "on" : "off") + " tx " + (p->tx ? "on" : "off");
      return !p->rx && !p->tx;
    }
  }
  return false;
}

result<apply_report> apply(const plan& p, const sysfs& fs, command_runner& runner,
                           const apply_options& opts) {
  journal jr;
  if (!opts.dry_run) {
    if (auto st = jr.open(opts.journal_path); !st) return fail(st.error());
  }
  const std::string run_id = now_iso() + "-" + std::to_string(::getpid());
  apply_report rep;
  rep.outcomes.reserve(p.ops.size());
  for (const auto& op : p.ops) {
    op_outcome out;
    out.op = &op;
    std::string actual;
    auto pre = check_state(op.verify, fs, runner, opts.tool_timeout, actual);
    if (pre && *pre) {
      out.s = op_outcome::state::already;
      out.after = actual;
    } else if (opts.dry_run) {
      out.s = op_outcome::state::would_change;
    } else {
      status done;
      if (op.disruptive && !opts.allow_disruptive) {
        // Removing VFs tears down the pods using them: only on explicit request.
        done = fail(make_error_code(errc::bad_request),
                    "refused, disruptive (" + op.why +
                        "); run again allowing disruptive changes (--allow-disruptive)");
      } else if (op.k == plan_op::kind::write) {
        done = fs.write(op.path, op.value);
      } else {
        auto r = run_tool(runner, op.argv, opts.tool_timeout);
        if (!r) done = fail(r.error());
      }
      if (!done) {
        out.s = op_outcome::state::failed;
        out.message = done.error().message;
      } else {
        auto post = check_state(op.verify, fs, runner, opts.tool_timeout, actual);
        out.after = actual;
        if (!post) {
          out.s = op_outcome::state::failed;
          out.message = "verify: " + post.error().message;
        } else if (!*post) {
          out.s = op_outcome::state::failed;
          out.message = "did not take effect: reads back \"" + actual + "\", expected \"" +
                        expected_text(op.verify) + "\"";
        } else {
          out.s = op_outcome::state::changed;
          ++rep.changed;
        }
      }
      nlohmann::json rec{{"run", run_id},
                         {"time", now_iso()},
                         {"node", p.node},
                         {"subject", op.subject},
                         {"what", op.what},
                         {"why", op.why},
                         {"before", op.before},
                         {"after", out.after},
                         {"result", out.s == op_outcome::state::changed ? "changed" : "failed"},
                         {"message", out.message}};
      if (op.k == plan_op::kind::write) {
        rec["write"] = {{"path", fs.path(op.path)}, {"value", op.value}};
      } else {
        rec["command"] = op.argv;
      }
      if (auto st = jr.append(rec); !st) return fail(st.error());
    }
    rep.outcomes.push_back(out);
    if (opts.progress) opts.progress(rep.outcomes.back());
    if (out.s == op_outcome::state::failed) {
      rep.ok = false;
      rep.failure = op.subject + ": " + op.what + ": " + out.message;
      break;
    }
  }
  return rep;
}

}  // namespace shoal::netsetup

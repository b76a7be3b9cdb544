#include "fake_tools.h"

#include <algorithm>
#include <filesystem>

#include "netsetup/errc.h"

namespace shoal::netsetup::testing {
namespace {

command_result ok(std::string out = {}) { return command_result{0, std::move(out), {}}; }
command_result bad(int code, std::string err) { return command_result{code, {}, std::move(err)}; }

bool is_read(const std::vector<std::string>& a) {
  if (a.empty()) return true;
  if (a[0] == "dcb") return std::find(a.begin(), a.end(), "show") != a.end();
  if (a[0] == "ethtool") return a.size() > 1 && a[1] == "-a";
  return false;
}

}  // namespace

std::vector<std::string> fake_tools::mutating_calls() const {
  std::vector<std::string> out;
  for (const auto& c : calls) {
    if (!is_read(c)) out.push_back(join_argv(c));
  }
  return out;
}

result<command_result> fake_tools::run(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds) {
  calls.push_back(argv);
  if (argv.empty()) return shoal::fail(make_error_code(errc::bad_request), "empty command");
  if (not_installed.contains(argv[0])) {
    return shoal::fail(make_error_code(errc::command_failed),
                       join_argv(argv) + ": cannot run: No such file or directory");
  }
  const std::string joined = join_argv(argv);
  for (const auto& [prefix, code] : fail_with) {
    if (joined.starts_with(prefix)) return bad(code, "injected failure\n");
  }
  for (const auto& prefix : no_effect) {
    if (joined.starts_with(prefix) && !is_read(argv)) return ok();
  }
  if (argv[0] == "dcb") return dcb(argv);
  if (argv[0] == "ethtool") return ethtool(argv);
  if (argv[0] == "ip") return ip(argv);
  if (argv[0] == "cma_roce_tos") return cma_roce_tos(argv);
  return bad(127, argv[0] + ": command not found\n");
}

command_result fake_tools::dcb(const std::vector<std::string>& a) {
  std::size_t i = 1;
  bool json = false;
  while (i < a.size() && a[i].starts_with("-")) json = json || a[i++] == "-j";
  if (i + 3 >= a.size() || a[i + 2] != "dev") return bad(1, "Usage: dcb ...\n");
  const std::string obj = a[i], verb = a[i + 1], dev = a[i + 3];
  auto it = devs.find(dev);
  if (it == devs.end()) return bad(1, "Attribute read: Operation not supported\n");
  dev_state& s = it->second;
  std::vector<std::string> rest(a.begin() + static_cast<long>(i) + 4, a.end());
  if (verb == "show") {
    if (!json) return bad(1, "this fake only speaks -j\n");
    if (obj == "pfc") return ok(render_dcb_pfc(s.pfc));
    if (obj == "app") return ok(render_dcb_app(s.app));
    if (obj == "ets") return ok(render_dcb_ets(s.ets));
    if (obj == "apptrust") return ok(render_dcb_apptrust(s.trust));
    return bad(1, "Object \"" + obj + "\" is unknown\n");
  }
  if (obj == "pfc" && verb == "set" && !rest.empty() && rest[0] == "prio-pfc") {
    for (std::size_t k = 1; k < rest.size(); ++k) {
      auto colon = rest[k].find(':');
      if (colon == std::string::npos) return bad(1, "Invalid pfc mapping\n");
      const std::string key = rest[k].substr(0, colon);
      const bool on = rest[k].substr(colon + 1) == "on";
      if (key == "all") {
        s.pfc.enabled.fill(on);
      } else {
        int p = std::stoi(key);
        if (p < 0 || p > 7) return bad(1, "Invalid pfc mapping\n");
        s.pfc.enabled[static_cast<std::size_t>(p)] = on;
      }
    }
    return ok();
  }
  if (obj == "app" && verb == "replace" && !rest.empty() && rest[0] == "dscp-prio") {
    for (std::size_t k = 1; k < rest.size(); ++k) {
      auto colon = rest[k].find(':');
      int d = std::stoi(rest[k].substr(0, colon));
      int p = std::stoi(rest[k].substr(colon + 1));
      std::erase_if(s.app.dscp_prio, [d](const auto& e) { return e.first == d; });
      s.app.dscp_prio.emplace_back(d, p);
    }
    std::sort(s.app.dscp_prio.begin(), s.app.dscp_prio.end());
    return ok();
  }
  if (obj == "apptrust" && verb == "set" && !rest.empty() && rest[0] == "order") {
    s.trust.assign(rest.begin() + 1, rest.end());
    return ok();
  }
  return bad(1, "What is \"" + verb + "\"?\n");
}

command_result fake_tools::ethtool(const std::vector<std::string>& a) {
  if (a.size() < 3) return bad(1, "ethtool: bad command line\n");
  auto it = devs.find(a[2]);
  if (it == devs.end())
    return bad(76, "Cannot get device pause settings: Operation not supported\n");
  pause_state& p = it->second.pause;
  if (a[1] == "-a") return ok(render_ethtool_pause(a[2], p));
  if (a[1] == "-A") {
    for (std::size_t k = 3; k + 1 < a.size(); k += 2) {
      const bool on = a[k + 1] == "on";
      if (a[k] == "autoneg")
        p.autoneg = on;
      else if (a[k] == "rx")
        p.rx = on;
      else if (a[k] == "tx")
        p.tx = on;
      else
        return bad(1, "ethtool: bad command line\n");
    }
    return ok();
  }
  return bad(1, "ethtool: bad command line\n");
}

command_result fake_tools::ip(const std::vector<std::string>& a) {
  // ip link set dev X mtu N | ip link set dev X up
  if (a.size() < 6 || a[1] != "link" || a[2] != "set" || a[3] != "dev") {
    return bad(1, "Command line is not complete.\n");
  }
  const std::string& dev = a[4];
  if (tree_ == nullptr || !std::filesystem::exists(tree_->real("/sys/class/net/" + dev))) {
    return bad(1, "Cannot find device \"" + dev + "\"\n");
  }
  const std::string dir = tree_->netdev_dir(dev);
  if (a[5] == "mtu" && a.size() == 7) {
    tree_->write(dir + "/mtu", a[6] + "\n");
    return ok();
  }
  if (a[5] == "up") {
    tree_->write(dir + "/flags", "0x1003\n");
    tree_->write(dir + "/operstate", "up\n");
    return ok();
  }
  return bad(1, "Error: either \"dev\" is duplicate, or \"" + a[5] + "\" is a garbage.\n");
}

command_result fake_tools::cma_roce_tos(const std::vector<std::string>& a) {
  std::string dev, port = "1", tos;
  for (std::size_t k = 1; k + 1 < a.size(); k += 2) {
    if (a[k] == "-d")
      dev = a[k + 1];
    else if (a[k] == "-p")
      port = a[k + 1];
    else if (a[k] == "-t")
      tos = a[k + 1];
  }
  if (dev.empty() || tos.empty() || tree_ == nullptr) return bad(1, "usage: cma_roce_tos\n");
  tree_->write("/sys/kernel/config/rdma_cm/" + dev + "/ports/" + port + "/default_roce_tos",
               tos + "\n");
  return ok();
}

}  // namespace shoal::netsetup::testing

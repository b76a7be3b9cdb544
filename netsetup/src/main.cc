// shoal-netsetup: RoCE discovery, plan, apply and validation on one node, and the per-job NCCL
// environment and cluster configs. Thin: parses flags, loads the policy, calls the library.
//
// Exit status: 0 success; 1 a check or an op failed; 2 bad usage, policy or input document.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/config.h"
#include "common/version.h"
#include "common/json_text.h"
#include "netsetup/command_runner.h"
#include "netsetup/discover.h"
#include "netsetup/errc.h"
#include "netsetup/job_outputs.h"
#include "netsetup/plan.h"
#include "netsetup/policy.h"
#include "netsetup/validate.h"

namespace ns = shoal::netsetup;
using shoal::json_text;

namespace {

struct options {
  std::string sysfs_root = "/";
  std::string node_name;
  std::string policy_file;
  std::string from;  // discovery document instead of live discovery
  bool no_tools = false;
  bool json = false;
  bool dry_run = false;
  bool allow_disruptive = false;
  std::string journal = "/var/lib/shoal/netsetup-journal.jsonl";
  std::vector<std::string> peers;
  std::string gpus;
};

// Never throws: strings that are not UTF-8 are replaced, not reported.
std::string pretty(const nlohmann::json& j) { return json_text(j, 2); }

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "shoal-netsetup: %s\n", msg.c_str());
  return 2;
}

shoal::result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return shoal::fail_errno(errno, "open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return shoal::fail_errno(errno, "read " + path);
  return ss.str();
}

shoal::result<ns::node_inventory> load_document(const std::string& path) {
  auto text = read_file(path);
  if (!text) return shoal::fail(text.error());
  auto inv = ns::parse_inventory(*text);
  if (!inv) return shoal::fail(inv.error().wrap(path));
  return inv;
}

shoal::result<ns::node_inventory> inventory(const options& o, const ns::policy& pol,
                                            ns::command_runner& runner) {
  if (!o.from.empty()) return load_document(o.from);
  ns::discover_options d;
  d.node_name = o.node_name;
  d.extra_netdevs = pol.interfaces;
  d.run_tools = !o.no_tools;
  return ns::discover(ns::sysfs(o.sysfs_root), runner, d);
}

void print_checks(const std::vector<ns::check_result>& results) {
  for (const auto& r : results) {
    std::printf("%-4s %-7s %-22s %-16s %-20s %s\n", std::string(ns::to_string(r.status)).c_str(),
                std::string(ns::to_string(r.sev)).c_str(), r.name.c_str(), r.node.c_str(),
                r.subject.c_str(), r.message.c_str());
  }
}

const char* state_word(ns::op_outcome::state s) {
  switch (s) {
    case ns::op_outcome::state::changed:
      return "changed";
    case ns::op_outcome::state::already:
      return "already";
    case ns::op_outcome::state::would_change:
      return "dry-run";
    case ns::op_outcome::state::failed:
      return "FAILED";
  }
  return "?";
}

// plan: the ordered changes, as JSON or one line each, and what the policy cannot get here.
int cmd_plan(const ns::plan& p, const options& o) {
  if (o.json) {
    std::printf("%s\n", pretty(ns::to_json(p)).c_str());
    return 0;
  }
  std::printf("plan for %s: %zu operation(s)\n", p.node.c_str(), p.ops.size());
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    std::printf("%3zu. %s\n", i + 1, ns::describe_op(p.ops[i]).c_str());
  }
  for (const auto& pr : p.problems) std::printf("  not possible here: %s\n", pr.c_str());
  return 0;
}

// One line per operation as apply() reaches it.
void print_outcome(const ns::op_outcome& out) {
  std::printf("[%s] %s: %s -- %s", state_word(out.s), out.op->subject.c_str(), out.op->what.c_str(),
              out.op->why.c_str());
  if (out.s == ns::op_outcome::state::failed) {
    std::printf(": %s", out.message.c_str());
  } else if (!out.after.empty()) {
    std::printf(" (now %s)", out.after.c_str());
  }
  std::printf("\n");
  std::fflush(stdout);
}

// apply: runs the plan on the live node, journalled, and sums it up.
int cmd_apply(const ns::plan& p, const options& o, ns::command_runner& runner) {
  if (!o.from.empty()) return usage_error("apply needs live discovery, not --from");
  ns::apply_options ao;
  ao.dry_run = o.dry_run;
  ao.allow_disruptive = o.allow_disruptive;
  ao.journal_path = o.journal;
  ao.progress = print_outcome;
  auto rep = ns::apply(p, ns::sysfs(o.sysfs_root), runner, ao);
  if (!rep) {
    std::fprintf(stderr, "shoal-netsetup: %s\n", rep.error().message.c_str());
    return 1;
  }
  for (const auto& pr : p.problems) std::printf("  not possible here: %s\n", pr.c_str());
  if (!rep->ok) {
    std::fprintf(stderr, "shoal-netsetup: apply stopped: %s\n", rep->failure.c_str());
    if (!o.dry_run) std::fprintf(stderr, "  changes so far are in %s\n", o.journal.c_str());
    return 1;
  }
  std::printf("%s: %d change(s)%s, %zu operation(s) already in place\n", p.node.c_str(),
              rep->changed, o.dry_run ? " (dry run)" : "",
              static_cast<std::size_t>(std::count_if(
                  rep->outcomes.begin(), rep->outcomes.end(),
                  [](const auto& x) { return x.s == ns::op_outcome::state::already; })));
  return 0;
}

// validate: this node's checks, each --peer document's, and the cross-node checks.
int cmd_validate(const ns::node_inventory& inv, const options& o, const ns::policy& pol) {
  std::vector<ns::node_inventory> nodes{inv};
  for (const auto& peer : o.peers) {
    auto d = load_document(peer);
    if (!d) return usage_error(d.error().message);
    nodes.push_back(std::move(*d));
  }
  std::vector<ns::check_result> all;
  for (const auto& n : nodes) {
    auto r = ns::validate_node(n, pol);
    all.insert(all.end(), r.begin(), r.end());
  }
  if (nodes.size() > 1) {
    auto r = ns::validate_cluster(nodes, pol);
    all.insert(all.end(), r.begin(), r.end());
  }
  if (o.json) {
    std::printf(
        "%s\n",
        pretty(nlohmann::json{{"passed", ns::passed(all)}, {"checks", ns::to_json(all)}}).c_str());
  } else {
    print_checks(all);
    std::printf("%s\n", ns::passed(all) ? "PASSED" : "FAILED");
  }
  return ns::passed(all) ? 0 : 1;
}

// nccl-env: the environment for the --gpus given (all when none), as JSON or shell.
int cmd_nccl_env(const ns::node_inventory& inv, const options& o, const ns::policy& pol) {
  std::vector<std::string> gpus;
  std::stringstream ss(o.gpus);
  for (std::string g; std::getline(ss, g, ',');) {
    if (!g.empty()) gpus.push_back(g);
  }
  auto env = ns::make_nccl_env(inv, gpus, pol);
  if (!env) return usage_error(env.error().message);
  if (o.json) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : env->vars) j[k] = v;
    std::printf("%s\n", pretty(j).c_str());
  } else {
    std::printf("%s", ns::to_shell(*env).c_str());
  }
  for (const auto& n : env->notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  return 0;
}

// Runs one subcommand on this node's inventory (discovered, or --from a document).
int run(const std::string& cmd, const options& o, const ns::policy& pol) {
  ns::process_runner runner;
  auto inv = inventory(o, pol, runner);
  if (!inv) {
    std::fprintf(stderr, "shoal-netsetup: %s\n", inv.error().message.c_str());
    return inv.error().code == ns::make_error_code(ns::errc::bad_document) ? 2 : 1;
  }
  if (cmd == "discover") {
    std::printf("%s\n", pretty(ns::to_json(*inv)).c_str());
    return 0;
  }
  if (cmd == "plan") return cmd_plan(ns::make_plan(*inv, pol), o);
  if (cmd == "apply") return cmd_apply(ns::make_plan(*inv, pol), o, runner);
  if (cmd == "validate") return cmd_validate(*inv, o, pol);
  if (cmd == "nccl-env") return cmd_nccl_env(*inv, o, pol);
  if (cmd == "cluster-config") {
    auto cfg = ns::cluster_configs(*inv, pol);
    if (!cfg) return usage_error(cfg.error().message);
    std::printf("%s\n", pretty(*cfg).c_str());
    return 0;
  }
  return usage_error("unknown command " + cmd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-netsetup: RoCE discovery, plan, apply and validation"};
  app.require_subcommand(0, 1);
  app.fallthrough();
  std::string version = shoal::version::text("shoal-netsetup", shoal::version::common_libraries());
  version.pop_back();  // CLI11 ends the text with a newline of its own
  app.set_version_flag("--version", version, "Print the version and the libraries' versions");
  options o;
  bool print_policy = false, policy_docs = false;
  app.add_option("--sysfs-root", o.sysfs_root, "Root under which /sys is read and written")
      ->capture_default_str();
  app.add_option("--node-name", o.node_name, "Node name in the discovery document (default: host)");
  app.add_option("--policy", o.policy_file, "Policy YAML (default: built-in defaults)");
  app.add_option("--from", o.from,
                 "Use this discovery document instead of discovering (plan, validate, nccl-env, "
                 "cluster-config)");
  app.add_flag("--no-tools", o.no_tools, "Do not run dcb/ethtool during discovery");
  app.add_flag("--print-policy", print_policy, "Print the effective policy as YAML and exit");
  app.add_flag("--print-policy-docs", policy_docs,
               "Print the policy reference (Markdown) and exit");
  app.add_subcommand("discover", "Print this node's discovery document (JSON)");
  auto* plan = app.add_subcommand("plan", "Print the ordered changes the policy needs, and why");
  plan->add_flag("--json", o.json, "JSON output");
  auto* apply = app.add_subcommand("apply", "Apply the plan, verifying each change");
  apply->add_flag("--dry-run", o.dry_run, "Show what would change; change nothing");
  apply->add_flag("--allow-disruptive", o.allow_disruptive,
                  "Allow changes that tear down state in use (resetting a VF count)");
  apply->add_option("--journal", o.journal, "JSON-lines record of every change")
      ->capture_default_str();
  auto* validate = app.add_subcommand("validate", "Run the named checks (and cross-node checks)");
  validate->add_option("--peer", o.peers, "Another node's discovery document (repeatable)");
  validate->add_flag("--json", o.json, "JSON output");
  auto* env = app.add_subcommand("nccl-env", "NCCL environment for a pod's GPUs");
  env->add_option("--gpus", o.gpus, "Comma-separated GPU BDFs or indices (default: all)");
  env->add_flag("--json", o.json, "JSON output");
  app.add_subcommand("cluster-config",
                     "sriov-network-device-plugin, Multus and rdma-shared-dev-plugin configs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  ns::policy pol;
  if (policy_docs) {
    std::printf("%s", shoal::config::to_markdown<ns::policy>("shoal-netsetup policy").c_str());
    return 0;
  }
  if (!o.policy_file.empty()) {
    if (auto st = shoal::config::load_file(o.policy_file, pol); !st) {
      return usage_error(st.error().message);
    }
  }
  if (print_policy) {
    std::printf("%s", shoal::config::to_yaml(pol).c_str());
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::printf("%s", app.help().c_str());
    return 2;
  }
  return run(app.get_subcommands().front()->get_name(), o, pol);
}

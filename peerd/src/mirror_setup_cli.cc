// mirror_setup.h: `shoal-peerd mirror install|uninstall`, the command line (CLI11) over
// plan(), check_containerd_config(), install() and uninstall().

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "common/config.h"
#include "peerd/mirror_setup.h"

namespace shoal::peerd::mirror_setup {

int run_cli(int argc, char** argv) {
  CLI::App app{
      "Points this node's containerd (certs.d/<registry>/hosts.toml) and CRI-O/podman "
      "(registries.conf.d/50-shoal.conf) at peerd, backing up every file it replaces; "
      "uninstall puts the originals back byte for byte.",
      "shoal-peerd mirror"};
  app.require_subcommand(1);
  options o;
  std::vector<std::string> configs;
  bool no_check = false, skip_containerd = false, skip_crio = false;
  auto* inst = app.add_subcommand("install",
                                  "Write the files (after checking containerd's "
                                  "config_path); run again after a config change.");
  auto* un = app.add_subcommand(
      "uninstall", "Restore what install replaced; files edited since install are kept.");
  inst->add_option("-c,--config", configs,
                   "peerd config file (repeatable; default /etc/shoal/peerd.yaml when it "
                   "exists): http.listen and mirror.registries");
  for (auto* c : {inst, un}) {
    c->add_option("--certs-dir", o.certs_dir, "containerd's registry hosts directory")
        ->capture_default_str();
    c->add_option("--backup-dir", o.backup_dir, "where replaced files and manifest.json are kept")
        ->capture_default_str();
  }
  inst->add_option("--containerd-config", o.containerd_config, "containerd's config file")
      ->capture_default_str();
  inst->add_option("--registries-conf-d", o.registries_conf_d,
                   "CRI-O/podman drop-in directory (skipped when its parent does not exist)")
      ->capture_default_str();
  inst->add_flag("--no-check", no_check, "write even if containerd's config_path points elsewhere");
  inst->add_flag("--skip-containerd", skip_containerd, "write no certs.d files");
  inst->add_flag("--skip-crio", skip_crio, "write no registries.conf.d drop-in");
  app.footer(
      "Exit status: 0 done, 1 failed (every step undone), 2 bad usage or config, 3 containerd's "
      "config_path does not point at --certs-dir (nothing written). docs/peerd.md \"Mirror "
      "set-up\".");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // The manifest names files by absolute path: uninstall may run from another directory.
  for (std::string* p : {&o.certs_dir, &o.backup_dir, &o.containerd_config, &o.registries_conf_d}) {
    std::error_code ec;
    if (auto abs = std::filesystem::absolute(*p, ec); !ec) *p = abs.lexically_normal().string();
  }
  o.check = !no_check;
  o.containerd = !skip_containerd;
  o.crio = !skip_crio;
  const sink out = [](std::string_view line) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  const std::string name = inst->parsed() ? "shoal-peerd mirror install"
                                          : "shoal-peerd mirror "
                                            "uninstall";
  if (un->parsed()) {
    if (auto st = uninstall(o, out); !st) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), st.error().message.c_str());
      return 1;
    }
    return 0;
  }
  peerd_config cfg;
  if (configs.empty() && ::access("/etc/shoal/peerd.yaml", R_OK) == 0)
    configs.push_back("/etc/shoal/peerd.yaml");
  if (auto st = config::load_files(configs, cfg); !st) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), st.error().message.c_str());
    return 2;
  }
  std::string used;
  for (const auto& c : configs) used += (used.empty() ? "" : ", ") + c;
  out("config: " + (used.empty() ? std::string("built-in defaults") : used));
  auto files = plan(cfg, o, out);
  if (!files) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), files.error().message.c_str());
    return 2;
  }
  if (o.containerd && o.check) {
    auto c = check_containerd_config(o.containerd_config, o.certs_dir);
    if (!c) {
      std::fprintf(stderr, "%s: containerd config: %s\n", name.c_str(), c.error().message.c_str());
      return 1;
    }
    if (!c->ok) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), c->message.c_str());
      return 3;
    }
    out(c->message);
  }
  if (auto st = install(*files, o, out); !st) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), st.error().message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace shoal::peerd::mirror_setup

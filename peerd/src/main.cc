// shoal-peerd: the node daemon (containerd mirror, swarm, local cache).
// `shoal-peerd mirror install|uninstall` sets up containerd and CRI-O to use it (mirror_setup.h).
#include <cstdio>
#include <string_view>

#include "peerd/app.h"
#include "common/log.h"
#include "peerd/mirror_setup.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "mirror")
    return shoal::peerd::mirror_setup::run_cli(argc - 1, argv + 1);
  shoal::peerd::peerd_config cfg;
  if (shoal::version::requested(argc, argv)) {
    std::fputs(shoal::version::text("shoal-peerd", shoal::peerd::linked_libraries()).c_str(),
               stdout);
    return 0;
  }
  auto args = shoal::config::parse_daemon_args(argc, argv, "shoal-peerd", cfg);
  if (!args) {
    std::fprintf(stderr, "shoal-peerd: %s\n", args.error().message.c_str());
    return 2;
  }
  if (args->exit) {
    std::fputs(args->output.c_str(), stdout);
    return 0;
  }
  if (auto s = shoal::daemon::init_logging(cfg.log, "peerd"); !s) {
    std::fprintf(stderr, "shoal-peerd: %s\n", s.error().message.c_str());
    return 2;
  }
  auto app = shoal::peerd::app::build(cfg);
  if (!app) {
    shoal::log::error("cannot start", shoal::log::kv("error", app.error().message));
    std::fprintf(stderr, "shoal-peerd: %s\n", app.error().message.c_str());
    return 1;
  }
  return (*app)->run();
}

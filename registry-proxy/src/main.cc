// shoal-registry-proxy: the cluster's OCI pull-through cache and P2P origin.
#include <cstdio>

#include "registry-proxy/app.h"
#include "common/log.h"

int main(int argc, char** argv) {
  shoal::proxy::proxy_config cfg;
  if (shoal::version::requested(argc, argv)) {
    std::fputs(
        shoal::version::text("shoal-registry-proxy", shoal::proxy::linked_libraries()).c_str(),
        stdout);
    return 0;
  }
  auto args = shoal::config::parse_daemon_args(argc, argv, "shoal-registry-proxy", cfg);
  if (!args) {
    std::fprintf(stderr, "shoal-registry-proxy: %s\n", args.error().message.c_str());
    return 2;
  }
  if (args->exit) {
    std::fputs(args->output.c_str(), stdout);
    return 0;
  }
  if (auto s = shoal::daemon::init_logging(cfg.log, "registry-proxy"); !s) {
    std::fprintf(stderr, "shoal-registry-proxy: %s\n", s.error().message.c_str());
    return 2;
  }
  auto app = shoal::proxy::app::build(cfg);
  if (!app) {
    shoal::log::error("cannot start", shoal::log::kv("error", app.error().message));
    std::fprintf(stderr, "shoal-registry-proxy: %s\n", app.error().message.c_str());
    return 1;
  }
  return (*app)->run();
}

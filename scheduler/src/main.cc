// shoal-scheduler: tracker, cluster cache index, placement.
#include <cstdio>

#include "scheduler/app.h"
#include "common/log.h"

int main(int argc, char** argv) {
  shoal::scheduler::scheduler_config cfg;
  if (shoal::version::requested(argc, argv)) {
    std::fputs(
        shoal::version::text("shoal-scheduler", shoal::scheduler::linked_libraries()).c_str(),
        stdout);
    return 0;
  }
  auto args = shoal::config::parse_daemon_args(argc, argv, "shoal-scheduler", cfg);
  if (!args) {
    std::fprintf(stderr, "shoal-scheduler: %s\n", args.error().message.c_str());
    return 2;
  }
  if (args->exit) {
    std::fputs(args->output.c_str(), stdout);
    return 0;
  }
  if (auto s = shoal::daemon::init_logging(cfg.log, "scheduler"); !s) {
    std::fprintf(stderr, "shoal-scheduler: %s\n", s.error().message.c_str());
    return 2;
  }
  auto app = shoal::scheduler::app::build(cfg);
  if (!app) {
    std::fprintf(stderr, "shoal-scheduler: %s\n", app.error().message.c_str());
    return 1;
  }
  return (*app)->run();
}

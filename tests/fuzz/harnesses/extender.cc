// kube-scheduler extender arguments (POST /filter and /prioritize bodies): parse never crashes,
// errors are UTF-8 and bounded, and what it keeps (warnings, node items) can be written back as
// JSON without throwing.
#include <nlohmann/json.hpp>

#include "scheduler/extender.h"
#include "../harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  auto a = scheduler::parse_extender_args(fuzz::text(data, size), 1000);
  fuzz::check_result(a, "parse_extender_args");
  if (!a) return 0;
  fuzz::accepted();
  for (const auto& w : a->pod.warnings) {
    if (!fuzz::valid_utf8(w)) fuzz::check_failed("extender warning is not UTF-8", w);
  }
  for (const auto& n : a->names) {
    if (!fuzz::valid_utf8(n)) fuzz::check_failed("extender node name is not UTF-8", n);
  }
  (void)a->node_items.dump();
  (void)a->node_list_meta.dump();
  nlohmann::json images = a->pod.images;
  nlohmann::json datasets = a->pod.datasets;
  (void)images.dump();
  (void)datasets.dump();
  return 0;
}

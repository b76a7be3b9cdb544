// kube-scheduler extender arguments (POST /filter and /prioritize bodies): parse never crashes,
// errors are UTF-8 and bounded, and what it keeps (warnings, node items) can be written back as
// JSON without throwing. With a names_cache (kept NodeNames lists, matched by their bytes) every
// input parses to the same answer as without one, the first time (which may keep its list) and
// the second (which may reuse it); the cache also holds the lists of earlier inputs.
#include <nlohmann/json.hpp>

#include "scheduler/extender.h"
#include "../harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  static scheduler::names_cache cache;
  const auto body = fuzz::text(data, size);
  auto a = scheduler::parse_extender_args(body, 1000);
  fuzz::check_result(a, "parse_extender_args");
  for (int pass = 0; pass < 2; ++pass) {
    auto c = scheduler::parse_extender_args(body, 1000, &cache);
    if (static_cast<bool>(c) != static_cast<bool>(a))
      fuzz::check_failed("a names_cache changed whether the arguments parse", body);
    if (a && (c->node_names() != a->node_names() || c->names_form != a->names_form))
      fuzz::check_failed("a names_cache changed the node names", body);
  }
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

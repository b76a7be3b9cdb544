// flat_json (common/flat_json.h), the parser under heartbeats, against nlohmann::json on every
// input: both refuse it, or both accept it with the same values and number kinds (the one
// intended difference, a NUL after the value, is allowed). Errors are UTF-8 and bounded, and
// every container's source() parses to the same value.
#include "common/flat_json.h"
#include "common/heartbeat.h"
#include "../harness.h"
#include "../../common/support/flat_json_compare.h"

namespace {

void check_sources(shoal::flat_json::value v, int depth) {
  using shoal::flat_json::kind;
  if (depth > 8 || (v.type() != kind::array && v.type() != kind::object)) return;
  auto again = shoal::flat_json::parse(v.source());
  if (!again) shoal::fuzz::check_failed("source() does not parse", v.source());
  if (shoal::testing::to_nlohmann(again->root()) != shoal::testing::to_nlohmann(v))
    shoal::fuzz::check_failed("source() parses to another value", v.source());
  if (v.type() == kind::array)
    for (auto x : v.elements()) check_sources(x, depth + 1);
  else
    for (auto m : v.members()) check_sources(m.value, depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shoal;
  const auto in = fuzz::text(data, size);
  // nlohmann recurses once per level: keep the comparison to depths it parses safely.
  if (heartbeat::json_too_deep(in, 200)) return 0;
  auto doc = flat_json::parse(in);
  fuzz::check_result(doc, "flat_json::parse");
  if (auto why = testing::flat_json_disagreement(in); !why.empty())
    fuzz::check_failed("flat_json and nlohmann disagree", why);
  if (doc) {
    fuzz::accepted();
    check_sources(doc->root(), 0);
  }
  return 0;
}

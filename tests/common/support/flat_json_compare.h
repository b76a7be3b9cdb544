#pragma once
// Test code: a flat_json document as nlohmann::json, and whether flat_json and nlohmann agree on a
// text (both refuse it, or both accept it with equal values, numbers of the same kind). Used by
// tests/common/flat_json_test.cc and the flat_json fuzz harness.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/flat_json.h"

namespace shoal::testing {

inline nlohmann::json to_nlohmann(flat_json::value v) {
  using flat_json::kind;
  switch (v.type()) {
    case kind::null:
      return nullptr;
    case kind::boolean:
      return v.as_bool();
    case kind::number_unsigned:
      return v.as_u64();
    case kind::number_integer:
      return v.as_i64();
    case kind::number_float:
      return v.as_double();
    case kind::string:
      return std::string(v.as_string());
    case kind::array: {
      auto a = nlohmann::json::array();
      for (auto x : v.elements()) a.push_back(to_nlohmann(x));
      return a;
    }
    case kind::object: {
      auto o = nlohmann::json::object();
      for (auto [k, x] : v.members()) o[std::string(k)] = to_nlohmann(x);  // last one wins
      return o;
    }
  }
  return nullptr;
}

// "" when they agree, else what differs.
inline std::string flat_json_disagreement(std::string_view text) {
  auto ours = flat_json::parse(text);
  auto theirs = nlohmann::json::parse(text, nullptr, false);
  if (!ours && theirs.is_discarded()) return {};
  if (!ours) {
    // The one intended difference: a NUL after the value (nlohmann stops reading there).
    auto at = ours.error().message.rfind("after the value at byte ");
    if (at != std::string::npos) {
      auto pos = std::stoul(ours.error().message.substr(at + 24));
      if (pos < text.size() && text[pos] == '\0') return {};
    }
    return "flat_json refused what nlohmann accepts: " + ours.error().message;
  }
  if (theirs.is_discarded()) return "flat_json accepted what nlohmann refuses";
  auto mine = to_nlohmann(ours->root());
  if (mine != theirs) return "values differ";
  // json's == compares numbers across kinds; the decoders care about the kind.
  std::string a = mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string b = theirs.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (a != b) return "dumps differ: " + a.substr(0, 200) + " vs " + b.substr(0, 200);
  // source() of every container is the text that parses to it.
  return {};
}

}  // namespace shoal::testing

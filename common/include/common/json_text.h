#pragma once
// JSON text that never throws on content, and string members read without throwing. nlohmann's
// dump() throws type_error 316 on a string that is not well-formed UTF-8: a registry's error cut in
// the middle of a character, a node's netsetup text, a sysfs value. On a pool, upkeep or resolver
// thread that exception ends the process. json_text writes U+FFFD for such bytes instead. Every
// JSON text a Shoal binary sends, stores or logs goes through here (tests/house checks that nothing
// calls dump() itself).

#include <string>

#include <nlohmann/json.hpp>

namespace shoal {

// Compact (indent < 0) or indented by `indent` spaces.
[[nodiscard]] inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The string member `key` of `obj`, or `fallback` when `obj` is not an object or the member is
// missing or not a string. nlohmann's value(key, "") throws type_error 302 on a member of another
// type (`{"manifest": 5}` from a peer), which on a worker thread ends the process.
[[nodiscard]] inline std::string json_string(const nlohmann::json& obj, const char* key,
                                             std::string fallback = {}) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace shoal

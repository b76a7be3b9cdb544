#pragma once
// Strings in netsetup's JSON come from sysfs, tools and policy files, none of which promise
// UTF-8; nlohmann::json::dump() throws on invalid UTF-8. Every document we emit is passed
// through make_printable() first, so any consumer can dump it with default settings.

#include <nlohmann/json.hpp>

namespace shoal::netsetup::detail {

// Replaces every byte outside printable ASCII in every string (keys included) with '?'.
void make_printable(nlohmann::json& j);

}  // namespace shoal::netsetup::detail

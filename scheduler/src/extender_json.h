#pragma once
// What the extender's two source files share (extender.cc answers, extender_args.cc reads).

#include <string>
#include <string_view>

namespace shoal::scheduler::detail {

// Appends `s` as a JSON string, byte for byte as nlohmann's dump() writes it: plain ASCII is
// copied as is, anything else (quotes, control bytes, UTF-8) goes through nlohmann.
void append_json_string(std::string& out, std::string_view s);

}  // namespace shoal::scheduler::detail

#pragma once
// Private helpers of the origin protocol (origin_protocol.cc, origin_answers.cc): bounded number
// parsing and UTF-8-safe excerpts of text taken from a peer's answer.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shoal::origin::detail {

// A decimal count of at most 18 digits (no sign, no spaces).
[[nodiscard]] std::optional<std::uint64_t> parse_count(std::string_view v);
// At most `max` bytes of `s` as valid UTF-8 without control characters: invalid sequences and
// control bytes become '?', a cut ends on a character boundary and adds "...".
[[nodiscard]] std::string printable(std::string_view s, std::size_t max);

}  // namespace shoal::origin::detail

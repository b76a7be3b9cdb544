#pragma once
// UTF-8 safety for foreign text (an origin's error, a Location header, curl's message about it)
// on its way into JSON or a log: nlohmann's dump() throws on invalid UTF-8, and an exception on
// a resolver thread ends the process.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shoal {

// Length of the well-formed UTF-8 sequence at the start of `s` (1 for ASCII), 0 if none (no
// overlong forms, surrogates or code points past U+10FFFF; Unicode table 3-7).
[[nodiscard]] std::size_t utf8_sequence(std::string_view s) noexcept;
// Appends `code_point` to `out` in UTF-8 (1 to 4 bytes; the caller checks the range).
void utf8_append(std::string& out, std::uint32_t code_point);
// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
[[nodiscard]] bool utf8_valid(std::string_view s) noexcept;
// `s` as well-formed UTF-8: every byte that does not start a well-formed sequence becomes U+FFFD,
// and the result is cut (on a character boundary, then "...") so that it holds at most
// `max_bytes` bytes of `s`. Never throws on content.
[[nodiscard]] std::string utf8_safe(std::string_view s, std::size_t max_bytes = 4096);

}  // namespace shoal

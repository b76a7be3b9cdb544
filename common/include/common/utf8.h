#pragma once
// UTF-8 safety for foreign text (an origin's error, a Location header, curl's message about it)
// on its way into JSON or a log: nlohmann's dump() throws on invalid UTF-8, and an exception on
// a resolver thread ends the process.

#include <cstddef>
#include <string>
#include <string_view>

namespace shoal {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
[[nodiscard]] bool utf8_valid(std::string_view s) noexcept;
// `s` as well-formed UTF-8: every byte that does not start a well-formed sequence becomes U+FFFD,
// and the result is cut (on a character boundary, then "...") so that it holds at most
// `max_bytes` bytes of `s`. Never throws on content.
[[nodiscard]] std::string utf8_safe(std::string_view s, std::size_t max_bytes = 4096);

}  // namespace shoal

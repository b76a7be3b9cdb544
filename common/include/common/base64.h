#pragma once
// Standard base64 (RFC 4648 §4, with padding, no line breaks), for bytes that travel inside
// headers and JSON: grants (common/grant.h), checkpoint torrents (common/checkpoint.h).

#include <cstddef>
#include <string>
#include <string_view>

#include "common/error.h"

namespace shoal {

[[nodiscard]] std::string base64_encode(std::string_view bytes);
// Strict: only the alphabet, padding only at the end, a length that is a multiple of 4, and at
// most `max_decoded` bytes once decoded (checked before decoding). Errors are protocol_error
// naming `what`.
[[nodiscard]] result<std::string> base64_decode(std::string_view text, std::size_t max_decoded,
                                                std::string_view what = "value");

}  // namespace shoal

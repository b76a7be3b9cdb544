#include "common/base64.h"

#include <openssl/evp.h>

namespace shoal {

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

result<std::string> base64_decode(std::string_view value, std::size_t max_decoded,
                                  std::string_view what) {
  auto bad = [&](std::string_view why) {
    return fail(errc::protocol_error, std::string(what) + " is not base64" + std::string(why));
  };
  if (value.empty()) return std::string();
  if (value.size() % 4 != 0) return bad(" (its length is not a multiple of 4)");
  if (value.size() / 4 > (max_decoded + 2) / 3)
    return bad(" of at most " + std::to_string(max_decoded) + " bytes");
  for (char ch : value) {
    bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '+' || ch == '/' || ch == '=';
    if (!ok) return bad("");
  }
  std::size_t pad = 0;
  if (value.back() == '=') ++pad;
  if (value.size() >= 2 && value[value.size() - 2] == '=') ++pad;
  if (value.find('=') < value.size() - pad) return bad("");
  std::string out(3 * value.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(value.data()),
                          static_cast<int>(value.size()));
  if (n < 0) return bad("");
  out.resize(static_cast<std::size_t>(n) - pad);
  if (out.size() > max_decoded) return bad(" of at most " + std::to_string(max_decoded) + " bytes");
  return out;
}

}  // namespace shoal

#include "common/credential_hash.h"

#include <openssl/rand.h>
#include <unistd.h>

#include <chrono>
#include <span>

#include "common/sha256.h"

namespace shoal {

std::string random_salt() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1) {
    auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    return sha256_of(std::to_string(t) + std::to_string(::getpid())).hex();
  }
  return to_hex(std::span<const std::uint8_t>(b, sizeof b));
}

std::string salted_credential_hash(std::string_view salt, std::string_view authorization) {
  sha256_hasher h;
  h.update(salt);
  h.update(authorization);
  return h.finish().hex();
}

}  // namespace shoal

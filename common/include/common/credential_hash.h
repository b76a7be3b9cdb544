#pragma once
// What a daemon remembers of a client's Authorization header: a salted SHA-256, never the value.
// registry-proxy keys its credential gate and access cache with it, peerd its confirmations.

#include <string>
#include <string_view>

namespace shoal {

// 32 random bytes as hex (OpenSSL's RAND_bytes; the clock and pid if that fails: the salt only
// has to be unguessable by clients). One per process, so nothing keyed by it survives a restart.
[[nodiscard]] std::string random_salt();

// Hex SHA-256 of salt + authorization.
[[nodiscard]] std::string salted_credential_hash(std::string_view salt,
                                                 std::string_view authorization);

}  // namespace shoal

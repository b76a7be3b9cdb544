#pragma once
// Errors as values: every fallible call in Shoal returns result<T> (std::expected) whose error
// carries a std::error_code (for programmatic checks) and a message with context
// ("open /cache/objects/ab/..: No such file or directory"). No exceptions cross an event loop.

#include <expected>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace shoal {

// Project-wide error codes. Components may add their own categories; these are the shared ones.
enum class errc {
  ok = 0,
  invalid_argument,  // malformed input from a caller or a peer
  invalid_digest,    // a digest string that does not parse (see digest_errc for the reason)
  not_found,         // object, key, route or peer unknown
  already_exists,    // an object is already present
  digest_mismatch,   // bytes do not hash to the digest they claim
  size_mismatch,     // bytes do not have the size they claim
  io_error,          // a filesystem or socket call failed (message carries errno text)
  no_space,          // ENOSPC after eviction
  timeout,           // connect, stall or overall deadline exceeded
  cancelled,         // the operation was aborted by shutdown or by its owner
  too_large,         // header, body or request beyond a configured limit
  range_not_satisfiable,
  protocol_error,  // a peer or upstream spoke something we cannot parse
  upstream_error,  // an upstream answered with an error status
  unavailable,     // a dependency is down or refusing connections
  unauthorized,    // credentials missing or rejected
  config_error,    // configuration file or flag problem
  busy,            // a resource is pinned or in use
  key_mismatch,    // a TLS private key that does not belong to its certificate
  internal,        // a bug: an invariant did not hold
};

}  // namespace shoal

template <>
struct std::is_error_code_enum<shoal::errc> : std::true_type {};

namespace shoal {

const std::error_category& shoal_category() noexcept;
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), shoal_category()};
}

// An error: a code and a human-readable message with context. Cheap to move.
struct error {
  std::error_code code;
  std::string message;

  error() = default;
  error(std::error_code c, std::string msg) : code(c), message(std::move(msg)) {}
  error(errc c, std::string msg) : code(make_error_code(c)), message(std::move(msg)) {}

  // "message (category: code text)" when the message does not already say it.
  [[nodiscard]] std::string to_string() const;
  [[nodiscard]] bool is(errc c) const noexcept { return code == make_error_code(c); }
  // Prefix context: err.wrap("commit sha256:ab..") → "commit sha256:ab..: <message>".
  [[nodiscard]] error wrap(std::string_view context) const&;
  [[nodiscard]] error wrap(std::string_view context) &&;
};

template <class T>
using result = std::expected<T, error>;
using status = std::expected<void, error>;

[[nodiscard]] inline std::unexpected<error> fail(errc c, std::string msg) {
  return std::unexpected<error>(error{c, std::move(msg)});
}
[[nodiscard]] inline std::unexpected<error> fail(std::error_code c, std::string msg) {
  return std::unexpected<error>(error{c, std::move(msg)});
}
[[nodiscard]] inline std::unexpected<error> fail(error e) {
  return std::unexpected<error>(std::move(e));
}
// An error from errno with the failing operation and path: "open /x: No such file or directory".
[[nodiscard]] error errno_error(int err, std::string_view what);
[[nodiscard]] inline std::unexpected<error> fail_errno(int err, std::string_view what) {
  return std::unexpected<error>(errno_error(err, what));
}

}  // namespace shoal

#include "common/error.h"

#include <cerrno>
#include <cstring>

namespace shoal {
namespace {

class shoal_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "shoal"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok:
        return "ok";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::invalid_digest:
        return "invalid digest";
      case errc::not_found:
        return "not found";
      case errc::already_exists:
        return "already exists";
      case errc::digest_mismatch:
        return "digest mismatch";
      case errc::size_mismatch:
        return "size mismatch";
      case errc::io_error:
        return "i/o error";
      case errc::no_space:
        return "no space left on device";
      case errc::timeout:
        return "timed out";
      case errc::cancelled:
        return "cancelled";
      case errc::too_large:
        return "too large";
      case errc::range_not_satisfiable:
        return "range not satisfiable";
      case errc::protocol_error:
        return "protocol error";
      case errc::upstream_error:
        return "upstream error";
      case errc::unavailable:
        return "unavailable";
      case errc::unauthorized:
        return "unauthorized";
      case errc::config_error:
        return "configuration error";
      case errc::busy:
        return "busy";
      case errc::key_mismatch:
        return "key does not match certificate";
      case errc::internal:
        return "internal error";
    }
    return "unknown shoal error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& shoal_category() noexcept {
  static const shoal_category_impl cat;
  return cat;
}

std::string error::to_string() const {
  if (message.empty()) return code.message();
  return message;
}

error error::wrap(std::string_view context) const& {
  error e = *this;
  e.message = std::string(context) + ": " + e.message;
  return e;
}

error error::wrap(std::string_view context) && {
  message = std::string(context) + ": " + message;
  return std::move(*this);
}

error errno_error(int err, std::string_view what) {
  errc c = errc::io_error;
  if (err == ENOSPC || err == EDQUOT)
    c = errc::no_space;
  else if (err == ENOENT)
    c = errc::not_found;
  else if (err == EEXIST)
    c = errc::already_exists;
  else if (err == ETIMEDOUT)
    c = errc::timeout;
  else if (err == ECANCELED)
    c = errc::cancelled;
  return error{c, std::string(what) + ": " + std::strerror(err)};
}

}  // namespace shoal

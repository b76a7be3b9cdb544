#include "netsetup/errc.h"

#include <string>

namespace shoal::netsetup {
namespace {

class category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "netsetup"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok:
        return "ok";
      case errc::sysfs_missing:
        return "sysfs entry missing";
      case errc::sysfs_garbage:
        return "sysfs content does not parse";
      case errc::sysfs_io:
        return "sysfs i/o error";
      case errc::command_failed:
        return "command failed";
      case errc::command_output:
        return "command output does not parse";
      case errc::bad_document:
        return "malformed discovery document";
      case errc::bad_request:
        return "bad request";
    }
    return "unknown netsetup error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& netsetup_category() noexcept {
  static const category_impl cat;
  return cat;
}

}  // namespace shoal::netsetup

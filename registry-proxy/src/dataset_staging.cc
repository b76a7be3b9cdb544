// The room dataset staging files may take (dataset_origin.h): listed sizes reserved against the
// cache's quota and the filesystem's free space before a byte is written.

#include <sys/statvfs.h>

#include "registry-proxy/dataset_origin.h"

namespace shoal::proxy {

namespace {

std::string mib(std::uint64_t n) { return std::to_string((n + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

status staging_budget::check_free(std::uint64_t n) const {
  struct statvfs v {};
  if (::statvfs(dir_.c_str(), &v) != 0) return {};  // cannot tell: the write reports ENOSPC
  const std::uint64_t avail = static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize;
  if (avail >= keep_free_ && avail - keep_free_ >= n) return {};
  return fail(errc::no_space, "the filesystem of datasets.staging_dir has " + mib(avail) +
                                  " free; an object listed at " + mib(n) +
                                  " more would leave less than " + mib(keep_free_));
}

status staging_budget::reserve(std::uint64_t n, std::uint64_t need) {
  std::lock_guard lk(mu_);
  const std::uint64_t cap = store_.capacity_bytes();
  const std::uint64_t held = reserved_.load();
  if (cap > 0) {
    if (n > cap || held > cap - n) {
      return fail(errc::no_space, "an object listed at " + mib(n) +
                                      " does not fit in the cache's quota of " + mib(cap) +
                                      " beside " + mib(held) + " of other staging files");
    }
    if (store_.usage_bytes() > cap - held - n) {
      (void)store_.evict_to(cap - held - n);
      if (store_.usage_bytes() > cap - held - n) {
        return fail(errc::no_space, "an object listed at " + mib(n) +
                                        " does not fit in the cache's quota of " + mib(cap) +
                                        " (pinned objects and other staging files hold the rest)");
      }
    }
  }
  if (auto s = check_free(need); !s) return s;
  reserved_.fetch_add(n);
  return {};
}

void staging_budget::release(std::uint64_t n) {
  std::lock_guard lk(mu_);
  reserved_.fetch_sub(std::min(n, reserved_.load()));
}

}  // namespace shoal::proxy

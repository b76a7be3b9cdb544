#include "peerd/netsetup_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/heartbeat.h"

namespace shoal::peerd {

namespace {

// At most `limit` + 1 bytes of the file: one more than allowed says it is too large without
// reading all of it. Returns false with errno set when it cannot be read.
bool read_bounded(const std::string& path, std::size_t limit, std::string& out) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  out.clear();
  char buf[64 * 1024];
  while (out.size() <= limit) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

const netsetup_report::reading& netsetup_report::current() {
  file_stamp now = stamp_of(path_);
  if (kept_ && now.err == 0 && now == stamp_) return last_;
  kept_ = false;
  last_ = {};
  const std::string what = "netsetup report " + path_;
  if (now.err != 0) {
    last_.reason = what + " cannot be read: " + std::strerror(now.err);
    return last_;
  }
  ++reads_;
  std::string text;
  if (!read_bounded(path_, heartbeat::max_document_bytes, text)) {
    last_.reason = what + " cannot be read: " + std::strerror(errno);
    return last_;
  }
  auto doc = text.size() > heartbeat::max_document_bytes
                 ? nlohmann::json(nullptr)
                 : nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    last_.reason = what + " is not a JSON object of at most 1 MiB";
  } else {
    last_.ok = true;
    last_.text = std::move(text);
  }
  // A verdict on the file as stamped before the read: a change during the read gives a new
  // stamp at the next call, and the file is read again then.
  stamp_ = now;
  kept_ = true;
  return last_;
}

}  // namespace shoal::peerd

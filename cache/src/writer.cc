// object_writer: the writer's side of one object — bytes into the temp file (overlapped with
// hashing on the io pool, out-of-order ranges absorbed as the prefix grows, one eviction and retry
// on a full filesystem), then commit (verify, sync, install) or abort.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core.h"

namespace shoal::cache {

namespace {

// Writes below this size are not worth a hand-off to the pool.
constexpr std::size_t parallel_threshold = 128 << 10;
// Ask the kernel to start writing back every this many bytes.
constexpr std::uint64_t writeback_step = 8 << 20;

struct io_outcome {
  std::size_t done = 0;  // bytes written
  int err = 0;           // errno of the call that stopped short; 0 when all were written
};

io_outcome write_fully(int fd, std::span<const std::byte> data, std::uint64_t offset) {
  io_outcome out;
  while (out.done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + out.done, data.size() - out.done,
                         static_cast<off_t>(offset + out.done));
    if (n < 0) {
      if (errno == EINTR) continue;
      out.err = errno;
      return out;
    }
    out.done += static_cast<std::size_t>(n);
  }
  return out;
}

}  // namespace

object_writer::object_writer(std::shared_ptr<detail::core> core,
                             std::shared_ptr<inflight_object> inflight, std::string tmp_name)
    : core_(std::move(core)), inflight_(std::move(inflight)), tmp_name_(std::move(tmp_name)) {}

object_writer::~object_writer() {
  if (!done_) abort("writer released without commit");
}

const digest& object_writer::id() const noexcept { return inflight_->id(); }

error object_writer::fail(error e) {
  if (done_) return e;
  done_ = true;
  bool mismatch = e.is(errc::digest_mismatch) || e.is(errc::size_mismatch);
  core_->abandon(inflight_, tmp_name_, reserved_, e, mismatch);
  reserved_ = 0;
  // A finished writer needs the store no more; letting go means a handle kept around by the
  // caller does not keep the store's index open after the store itself is closed.
  core_.reset();
  return e;
}

void object_writer::abort(std::string_view reason) {
  if (done_) return;
  (void)fail(error{errc::cancelled, "write of " + id().str() + " aborted: " + std::string(reason)});
}

status object_writer::write(std::span<const std::byte> data) {
  return write_bytes(contiguous_, data);
}

status object_writer::write(std::string_view data) {
  return write_bytes(
      contiguous_,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size()));
}

status object_writer::write_at(std::uint64_t offset, std::span<const std::byte> data) {
  return write_bytes(offset, data);
}

status object_writer::ensure_reserved(std::uint64_t end) {
  if (end <= reserved_) return {};
  // Without an expected size, reserve ahead in 4 MiB steps so that a stream of small writes does
  // not consult the capacity on every call.
  // The step ahead is taken only if it fits without evicting anything.
  if (!inflight_->expected_size()) {
    std::uint64_t ahead = std::max<std::uint64_t>(end, reserved_ + (4ull << 20));
    if (core_->reserve(ahead - reserved_, false)) {
      reserved_ = ahead;
      return {};
    }
  }
  if (auto st = core_->reserve(end - reserved_); !st) return st;
  reserved_ = end;
  return {};
}

status object_writer::hash_from_file(std::uint64_t from, std::uint64_t to) {
  std::vector<char> buf(std::min<std::uint64_t>(to - from, 1 << 20));
  int fd = inflight_->fd();
  while (from < to) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), to - from));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(from));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "re-read " + id().str() + " for hashing");
    }
    if (n == 0)
      return ::shoal::fail(errc::io_error, "re-read " + id().str() + ": unexpected end of file");
    hasher_.update(buf.data(), static_cast<std::size_t>(n));
    from += static_cast<std::uint64_t>(n);
  }
  return {};
}

status object_writer::write_whole_hashed(std::string_view data, const digest& sha256) {
  if (done_) {
    return ::shoal::fail(errc::invalid_argument,
                         "write to " + id().str() + " after commit or abort");
  }
  if (contiguous_ != 0 || !pending_.empty()) {
    return ::shoal::fail(errc::invalid_argument,
                         "whole write of " + id().str() + " after other writes");
  }
  if (auto exp = inflight_->expected_size(); !exp || *exp != data.size()) {
    return ::shoal::fail(errc::size_mismatch,
                         "whole write of " + id().str() + ": " + std::to_string(data.size()) +
                             " bytes, expected " + (exp ? std::to_string(*exp) : "a known size"));
  }
  prehashed_ = sha256;
  auto st = write_bytes(0, std::as_bytes(std::span(data.data(), data.size())));
  if (!st) prehashed_.reset();
  return st;
}

status object_writer::write_bytes(std::uint64_t offset, std::span<const std::byte> data) {
  if (done_) {
    return ::shoal::fail(errc::invalid_argument,
                         "write to " + id().str() + " after commit or abort");
  }
  if (core_->closed()) return std::unexpected(fail(error{errc::cancelled, "cache is closed"}));
  if (data.empty()) return {};
  std::uint64_t end = offset + data.size();
  if (auto exp = inflight_->expected_size(); exp && end > *exp) {
    return std::unexpected(fail(error{
        errc::size_mismatch, "write of " + id().str() + " goes past its expected size " +
                                 std::to_string(*exp) + " (to " + std::to_string(end) + ")"}));
  }
  if (offset < contiguous_) {
    // Not fatal for the write: the caller asked for something meaningless.
    return ::shoal::fail(errc::invalid_argument, "write of " + id().str() + " at " +
                                                     std::to_string(offset) +
                                                     " rewrites bytes already written (up to " +
                                                     std::to_string(contiguous_) + ")");
  }
  if (auto st = ensure_reserved(end); !st) {
    core_->count_no_space();
    return std::unexpected(fail(st.error().wrap("write " + id().str())));
  }
  int fd = inflight_->fd();
  // In-order writes are hashed on this thread while the pool copies the bytes into the file.
  const bool in_order = offset == contiguous_;
  detail::io_pool* pool = core_->pool();
  io_outcome out;
  bool hashed = false;
  if (prehashed_) {
    out = write_fully(fd, data, offset);
    hashed = true;  // by the caller (write_whole_hashed)
  } else if (pool && in_order && data.size() >= parallel_threshold) {
    std::future<void> done = pool->submit([&] { out = write_fully(fd, data, offset); });
    hasher_.update(data.data(), data.size());  // wasted only if the write fails for good
    hashed = true;
    done.wait();
  } else {
    out = write_fully(fd, data, offset);
  }
  if (out.err == ENOSPC || out.err == EDQUOT) {
    // The filesystem is full: evict once and retry the rest, else fail cleanly.
    std::uint64_t off = offset + out.done;
    std::uint64_t need = data.size() - out.done;
    if (auto exp = inflight_->expected_size()) need = std::max<std::uint64_t>(need, *exp - off);
    core_->make_room(need);
    io_outcome again = write_fully(fd, data.subspan(out.done), off);
    out.done += again.done;
    out.err = again.err;
    if (out.err == ENOSPC || out.err == EDQUOT) {
      core_->count_no_space();
      return std::unexpected(
          fail(error{errc::no_space, "write " + id().str() + ": filesystem full after evicting (" +
                                         std::string(std::strerror(out.err)) + "), " +
                                         std::to_string(offset + out.done) + " bytes written"}));
    }
  }
  if (out.err != 0) {
    return std::unexpected(fail(errno_error(out.err, "write " + id().str() + " to temp file")));
  }
  if (in_order && !hashed) hasher_.update(data.data(), data.size());
  // Start writeback early so that commit's fdatasync finds little left to do.
  if (end > writeback_from_ && end - writeback_from_ >= writeback_step) {
    ::sync_file_range(fd, static_cast<off_t>(writeback_from_),
                      static_cast<off_t>(end - writeback_from_), SYNC_FILE_RANGE_WRITE);
    writeback_from_ = end;
  }
  if (in_order) {
    contiguous_ = end;
  } else {
    auto& e = pending_[offset];
    e = std::max(e, end);
  }
  // Absorb out-of-order ranges that now touch the contiguous prefix.
  while (!pending_.empty() && pending_.begin()->first <= contiguous_) {
    std::uint64_t e = pending_.begin()->second;
    pending_.erase(pending_.begin());
    if (e > contiguous_) {
      if (auto st = hash_from_file(contiguous_, e); !st) return std::unexpected(fail(st.error()));
      contiguous_ = e;
    }
  }
  inflight_->advance(contiguous_);
  return {};
}

result<object_info> object_writer::commit() {
  if (done_) {
    return ::shoal::fail(errc::invalid_argument,
                         "commit of " + id().str() + " after commit or abort");
  }
  if (core_->closed()) return std::unexpected(fail(error{errc::cancelled, "cache is closed"}));
  if (!pending_.empty()) {
    return std::unexpected(
        fail(error{errc::size_mismatch, "commit " + id().str() + ": bytes missing between " +
                                            std::to_string(contiguous_) + " and " +
                                            std::to_string(pending_.begin()->first)}));
  }
  std::uint64_t size = contiguous_;
  if (auto exp = inflight_->expected_size(); exp && size != *exp) {
    return std::unexpected(
        fail(error{errc::size_mismatch, "commit " + id().str() + ": got " + std::to_string(size) +
                                            " bytes, expected " + std::to_string(*exp)}));
  }
  digest got = prehashed_ ? *prehashed_ : hasher_.finish();
  if (got != id()) {
    return std::unexpected(fail(
        error{errc::digest_mismatch, "commit " + id().str() + ": content hashes to " + got.str()}));
  }
  // Followers streaming the object may send its last byte now; durability comes next.
  inflight_->mark_verified();
  int fd = inflight_->fd();
  if (auto st = detail::fdatasync_fd(fd, "fdatasync " + tmp_name_); !st) {
    return std::unexpected(fail(st.error().wrap("commit " + id().str())));
  }
  if (::fchmod(fd, 0444) != 0) {
    return std::unexpected(fail(errno_error(errno, "commit " + id().str() + ": fchmod")));
  }
  detail::install_source src{core_->dirs().tmp_fd(), tmp_name_, false};
  auto info = core_->install(inflight_, src, size, reserved_, false);
  if (!info) return std::unexpected(fail(info.error()));
  done_ = true;
  reserved_ = 0;
  core_.reset();
  return info;
}

}  // namespace shoal::cache

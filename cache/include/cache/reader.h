#pragma once
// object_reader: an open, committed, verified object. Owns a read-only file descriptor that the
// caller may hand to sendfile(2) or pread(2); the fd stays valid even if the object is evicted
// meanwhile (Unix unlink semantics), so a response in progress is never cut short.

#include <cstdint>
#include <span>
#include <string>

#include "cache/types.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::cache {

namespace detail {
class core;
}

// Move-only; closes its fd on destruction. Not thread-safe for concurrent moves, but pread() and
// fd() may be used from several threads at once (pread does not move the file offset).
class object_reader {
 public:
  object_reader(object_reader&& o) noexcept;
  object_reader& operator=(object_reader&& o) noexcept;
  object_reader(const object_reader&) = delete;
  object_reader& operator=(const object_reader&) = delete;
  ~object_reader();

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t size() const noexcept { return size_; }
  [[nodiscard]] const digest& id() const noexcept { return id_; }
  [[nodiscard]] object_kind kind() const noexcept { return kind_; }

  // ok when [offset, offset+length) lies inside the object; else errc::range_not_satisfiable.
  [[nodiscard]] status check_range(std::uint64_t offset, std::uint64_t length) const;
  // Reads up to out.size() bytes at `offset` (fewer only at the end of the object).
  [[nodiscard]] result<std::size_t> pread(std::uint64_t offset, std::span<std::byte> out) const;
  // Reads exactly [offset, offset+length) into a string (convenience for small objects).
  [[nodiscard]] result<std::string> read(std::uint64_t offset, std::uint64_t length) const;
  [[nodiscard]] result<std::string> read_all() const { return read(0, size_); }

  // Gives up ownership of the fd (the caller closes it).
  [[nodiscard]] int release() noexcept;

 private:
  friend class detail::core;
  object_reader(int fd, const digest& id, std::uint64_t size, object_kind kind) noexcept
      : fd_(fd), size_(size), id_(id), kind_(kind) {}

  int fd_ = -1;
  std::uint64_t size_ = 0;
  digest id_;
  object_kind kind_ = object_kind::blob;
};

}  // namespace shoal::cache

#pragma once
// Streaming SHA-256 on OpenSSL EVP (uses SHA-NI / AVX2 where the CPU has them).

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "common/digest.h"

namespace shoal {

// Not thread-safe; one hasher per stream. Movable, not copyable.
class sha256_hasher {
 public:
  sha256_hasher();
  ~sha256_hasher();
  sha256_hasher(sha256_hasher&&) noexcept;
  sha256_hasher& operator=(sha256_hasher&&) noexcept;
  sha256_hasher(const sha256_hasher&) = delete;
  sha256_hasher& operator=(const sha256_hasher&) = delete;

  void update(std::span<const std::byte> data);
  void update(std::string_view data);
  void update(const void* data, std::size_t n);
  // Finishes the hash and resets the hasher for reuse.
  [[nodiscard]] digest finish();
  // Bytes fed since construction or the last finish().
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  struct ctx_deleter {
    void operator()(void* p) const noexcept;
  };
  std::unique_ptr<void, ctx_deleter> ctx_;
  std::uint64_t bytes_ = 0;
};

[[nodiscard]] digest sha256_of(std::string_view data);
// Hashes a whole file by path with large sequential reads.
[[nodiscard]] result<digest> sha256_file(const std::string& path,
                                         std::uint64_t* size_out = nullptr);
// Hashes `len` bytes of an open fd starting at `off` (pread; does not move the file offset).
[[nodiscard]] result<digest> sha256_fd(int fd, std::uint64_t off, std::uint64_t len);
// Feeds `len` bytes of an open fd starting at `off` into `h` (pread): to hash a file in steps as
// its bytes land. On failure `h` has taken an unknown part of the range.
[[nodiscard]] status sha256_update_fd(sha256_hasher& h, int fd, std::uint64_t off,
                                      std::uint64_t len);

}  // namespace shoal

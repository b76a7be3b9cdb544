#include "common/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace shoal {

void sha256_hasher::ctx_deleter::operator()(void* p) const noexcept {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(p));
}

sha256_hasher::sha256_hasher() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ ||
      EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_.get()), EVP_sha256(), nullptr) != 1) {
    std::abort();  // allocation failure inside OpenSSL: nothing sensible to do
  }
}
sha256_hasher::~sha256_hasher() = default;
sha256_hasher::sha256_hasher(sha256_hasher&&) noexcept = default;
sha256_hasher& sha256_hasher::operator=(sha256_hasher&&) noexcept = default;

void sha256_hasher::update(const void* data, std::size_t n) {
  if (n == 0) return;
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_.get()), data, n);
  bytes_ += n;
}
void sha256_hasher::update(std::span<const std::byte> data) { update(data.data(), data.size()); }
void sha256_hasher::update(std::string_view data) { update(data.data(), data.size()); }

digest sha256_hasher::finish() {
  std::array<std::uint8_t, digest::size> out{};
  unsigned int len = 0;
  auto* ctx = static_cast<EVP_MD_CTX*>(ctx_.get());
  EVP_DigestFinal_ex(ctx, out.data(), &len);
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  bytes_ = 0;
  return digest{out};
}

digest sha256_of(std::string_view data) {
  sha256_hasher h;
  h.update(data);
  return h.finish();
}

status sha256_update_fd(sha256_hasher& h, int fd, std::uint64_t off, std::uint64_t len) {
  constexpr std::size_t chunk = 1 << 20;
  // One buffer per thread, not zeroed: a hasher called in steps (a download's prefix as it lands)
  // would otherwise map, fault in and clear a fresh MiB for every step.
  thread_local std::unique_ptr<char[]> buf = std::make_unique_for_overwrite<char[]>(chunk);
  std::uint64_t done = 0;
  while (done < len) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, len - done));
    ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "pread");
    }
    if (n == 0)
      return fail(errc::size_mismatch, "file ended after " + std::to_string(done) + " of " +
                                           std::to_string(len) + " bytes");
    h.update(buf.get(), static_cast<std::size_t>(n));
    done += static_cast<std::uint64_t>(n);
  }
  return {};
}

result<digest> sha256_fd(int fd, std::uint64_t off, std::uint64_t len) {
  sha256_hasher h;
  if (auto s = sha256_update_fd(h, fd, off, len); !s) return std::unexpected(s.error());
  return h.finish();
}

result<digest> sha256_file(const std::string& path, std::uint64_t* size_out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail_errno(errno, "open " + path);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr std::size_t chunk = 1 << 20;
  std::vector<char> buf(chunk);
  sha256_hasher h;
  std::uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return fail_errno(e, "read " + path);
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  if (size_out) *size_out = total;
  return h.finish();
}

}  // namespace shoal

// An object's sha256 as its bytes land. A download's pieces pass their SHA-1 against metainfo
// fetched over HTTP, so the object is trusted only once its whole sha256 matches its digest.
// That pass used to come after the last piece: the cache re-read the whole file, then
// fdatasynced it, and only then could a reader have the object's last byte (about 1.5 s and
// 2.8 s for 2 GiB here). Now a hash step on the worker pool feeds the object's sha256 from its
// file as flushes confirm a longer prefix of verified pieces (the readers' when_in_file flushes;
// with in-order readers the prefix follows the download), and starts the writeback of what it
// hashed. When the file is staged, the step hashes what is left, and on a match the readers get
// the last byte at once while the cache commits the file on the strength of this hash
// (cache::content_proof: the same inode, the same size). Any failure leaves the cache to hash
// the file itself, as before.

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

namespace {
// At most this much per step, so one download does not hold a pool thread for long.
constexpr std::uint64_t step_bytes = 64ull << 20;
}  // namespace

std::uint64_t download::confirmed_prefix_locked() const {
  if (meta_.piece_size == 0) return 0;
  auto p = static_cast<std::uint32_t>(hashed_ / meta_.piece_size);
  std::uint64_t end = hashed_;
  while (p < in_file_.size() && in_file_[p]) {
    end = meta_.piece_offset(p) + meta_.piece_length(p);
    ++p;
  }
  return end;
}

bool download::verified() const {
  std::lock_guard lk(mu_);
  return verified_;
}

std::string download::file_path_locked() const {
  return staged_path_.empty() ? partial_dir_ + "/" + id_.hex() : staged_path_;
}

std::string download::partial_path() const {
  std::lock_guard lk(mu_);
  return file_path_locked();
}

void swarm_manager::hash_more(const std::shared_ptr<download>& dl) {
  if (dl->transient()) return;  // a chunk is verified as part of its blob
  {
    std::lock_guard lk(dl->mu_);
    if (dl->hashing_) return;
    // Once the file is staged the steps run to the end, which adopts it even if the download
    // ended meanwhile (complete() then keeps the object and drops its seed).
    if (!dl->hash_final_ && (dl->st_ != transfer::state::running || dl->hash_broken_ ||
                             dl->confirmed_prefix_locked() <= dl->hashed_))
      return;
    dl->hashing_ = true;
  }
  post_step(dl, [this, dl] { hash_step(dl); });
}

void swarm_manager::hash_step(const std::shared_ptr<download>& dl) {
  const std::uint64_t size = dl->meta().size;
  std::uint64_t from = 0, to = 0;
  bool final = false, broken = false;
  std::string path;
  {
    std::lock_guard lk(dl->mu_);
    final = dl->hash_final_;
    if (dl->st_ != transfer::state::running && !final) {
      dl->hashing_ = false;
      return;
    }
    broken = dl->hash_broken_;
    from = dl->hashed_;
    to = final ? size : dl->confirmed_prefix_locked();
    if (!final && (broken || to <= from)) {
      dl->hashing_ = false;
      return;
    }
    path = dl->file_path_locked();
  }
  // The file is staged: from here this step owns the download's end.
  auto adopt = [&](const cache::content_proof* proof) {
    std::vector<std::string> peers;
    {
      std::lock_guard lk(dl->mu_);
      peers.swap(dl->finish_peers_);
    }
    complete(dl, peers, proof);
  };
  if (broken) return adopt(nullptr);
  to = std::min(to, from + step_bytes);
  auto give_up = [&](const std::string& why) {
    log::warn("object: hashing its file as it lands failed; the cache hashes it at the end",
              log::kv("digest", dl->id().str()), log::kv("error", why));
    {
      std::lock_guard lk(dl->mu_);
      dl->hash_broken_ = true;
      if (!final) dl->hashing_ = false;
    }
    if (final) return adopt(nullptr);
    // The file may have been staged while this step ran (`final` was read before): then
    // finish_object found a step running and queued none, and this one must queue the last.
    hash_more(dl);
  };
  if (!dl->hash_fd_) {
    dl->hash_fd_ = unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!dl->hash_fd_ && errno == ENOENT && !final) {
      // Every piece verified and libtorrent moved the file to staging before finish_object
      // said so: the same file under its staged name.
      dl->hash_fd_ = unique_fd(::open(staged_file(dl->id()).c_str(), O_RDONLY | O_CLOEXEC));
    }
    if (!dl->hash_fd_) return give_up("open " + path + ": " + std::strerror(errno));
  }
  const int fd = dl->hash_fd_.get();
  if (to > from) {
    if (auto s = sha256_update_fd(dl->hasher_, fd, from, to - from); !s)
      return give_up(s.error().message);
    // Start the writeback of what was hashed, so the commit's fdatasync finds little left.
    ::sync_file_range(fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                      SYNC_FILE_RANGE_WRITE);
    (final ? counters_.hashed_after_download : counters_.hashed_while_downloading)
        .fetch_add(to - from);
  }
  {
    std::lock_guard lk(dl->mu_);
    dl->hashed_ = to;
  }
  if (to < size || !final) {
    // More to hash (now, or once more of the prefix is confirmed): this step again, queued
    // behind other work.
    {
      std::lock_guard lk(dl->mu_);
      dl->hashing_ = false;
    }
    return hash_more(dl);
  }
  if (dl->hasher_.finish() != dl->id()) {
    // The cache's own pass finds the mismatch again, counts and reports it (complete).
    dl->hash_fd_.reset();
    return adopt(nullptr);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return give_up(std::string("fstat: ") + std::strerror(errno));
  cache::content_proof proof{size, static_cast<std::uint64_t>(st.st_dev),
                             static_cast<std::uint64_t>(st.st_ino)};
  dl->hash_fd_.reset();
  std::vector<std::function<void()>> readers;
  {
    std::lock_guard lk(dl->mu_);
    dl->verified_ = true;
    // Every write is in the file (the move to staging waited for them): readers take the rest
    // of the object from it, its last byte included.
    dl->in_file_.assign(dl->in_file_.size(), true);
    readers = dl->take_file_waiters();
  }
  for (auto& cb : readers) cb();
  adopt(&proof);
}

}  // namespace shoal::peerd

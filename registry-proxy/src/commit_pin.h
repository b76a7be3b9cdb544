#pragma once
// commit_pin_guard: an object committed to registry-proxy's cache stays pinned until its seed pins
// it (blob_fetch.h for blobs, blob_chunks.cc for chunk objects).

#include <chrono>
#include <string_view>

#include "cache/store.h"
#include "common/digest.h"

namespace shoal::proxy {

// Keeps `id` pinned from before its commit to the end of the scope, by when notify_committed has
// had the seeder pin it: the watermark pass must not take the object in between (a newly cut
// chunk is then the only unpinned one; hashing a blob for its metainfo can take seconds).
class commit_pin_guard {
 public:
  commit_pin_guard(cache::store& s, const digest& id) : s_(s), id_(id) {
    (void)s_.pin(id_, owner, cache::clock::now() + std::chrono::minutes(10));
  }
  ~commit_pin_guard() { (void)s_.unpin(id_, owner); }
  commit_pin_guard(const commit_pin_guard&) = delete;
  commit_pin_guard& operator=(const commit_pin_guard&) = delete;

 private:
  static constexpr std::string_view owner = "committing";
  cache::store& s_;
  digest id_;
};

}  // namespace shoal::proxy

#pragma once
// A small Range of a blob asked of upstream on its own: a lazy reader's (stargz, a peerd
// reading ahead of the chunks) first look far beyond the bytes the blob's one fetch has written.
// The whole-object fetch goes on; this is one extra GET with the range, answered from memory.
// Upstream's bytes are as trusted as those of the fetch in flight, which are also sent before
// the object is verified (the client checks the digest of what it assembles). Anything but a
// 206 with exactly the asked bytes (Content-Range and length) serves the range from the fetch
// instead: the client never sees the difference but in time. Private to blob_service.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include <boost/asio/thread_pool.hpp>

#include "common/digest.h"
#include "common/http_server.h"
#include "registry-proxy/blobs.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

struct upstream_range_request {
  upstream_client* uc = nullptr;
  boost::asio::thread_pool* pool = nullptr;  // the blocking upstream call runs there
  selection sel;
  credential cred;  // sent upstream when upstream refuses the proxy's own (as a HEAD does)
  digest id;
  std::uint64_t off = 0, len = 0;  // len ≥ 1, bounded
  blob_metrics m;
  // Counts this request while it runs (the caller counted it); decremented when it ends.
  std::shared_ptr<std::atomic<int>> running;
  // The same range from the fetch's own bytes, for when upstream does not answer it.
  std::function<std::unique_ptr<http::body_source>()> fallback;
};

// Asks upstream when the server asks for the first piece; serves the answer in pieces of the
// server's size.
[[nodiscard]] std::unique_ptr<http::body_source> upstream_range_source(upstream_range_request r);

}  // namespace shoal::proxy

#pragma once
// Copies of dataset records between registry-proxy replicas on the ring (ring.h, datasets.h).
//
// A dataset ref has one owner, the replica that resolves it. So that the ref keeps answering
// while its owner is away, the owner copies each record it saves to every other member:
//
//   PUT <datasets>/<name>@<version>/copy    body: the record's JSON, header ring::from_header
//
// The receiver, when the record is ready and it lacks the canonical manifest, fetches it from
// the sender (GET <datasets>/<ref>/manifest with ring::from_header, verified against its digest),
// then keeps both as a standby record (dataset_service::accept_copy). Once the owner is away,
// the next member in the ref's order owns it and answers from that record.
//
// Members follow the ring's (ring.h: announced members join and leave): a member that joins gets
// every record this replica owns (`own_records`), one that leaves is forgotten with its queue.
// Per member, copies go one at a time in the order they were saved; only the latest of a ref is
// kept while one waits. A copy that fails waits for the member's next retry (every
// retry_interval, while the ring sees the member up): a member that was away gets what was
// saved meanwhile when it returns, and a replica that starts copies all its records again.
//
// Threading: push() from any thread; sends and their completions run on the ring's HTTP client
// thread, retries on the io_context given to start().

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/digest.h"
#include "common/metrics.h"
#include "registry-proxy/ring.h"

namespace shoal::proxy {

class dataset_copies {
 public:
  // The path suffix of a copy under <datasets>/<ref>.
  static constexpr std::string_view suffix = "/copy";

  using records_fn = std::function<std::vector<std::pair<std::string, std::string>>()>;
  // `own_records`: every record this replica owns, as (ref, record JSON), for a member that
  // joins the ring after the start.
  dataset_copies(ring& r, metrics::registry& reg, std::chrono::milliseconds retry_interval,
                 records_fn own_records = {});
  ~dataset_copies();
  dataset_copies(const dataset_copies&) = delete;
  dataset_copies& operator=(const dataset_copies&) = delete;

  void start(boost::asio::io_context& io);
  void stop();

  // Queues `record_json` of `ref` for every other member.
  void push(const std::string& ref, const std::string& record_json);

  // A ready version of `ref` at another member (dataset_service_options::ready_elsewhere): the
  // first member up, in ring order, whose record (its status route, asked with
  // ring::from_header so it answers from its own record) is ready, with the manifest it serves.
  // A member whose record is still resolving (it took the ref over while the asker was away) is
  // asked again every 0.5 s until it is ready, failed or gone, for at most `wait`, or until
  // `stop`. Blocking: not on the HTTP client's thread.
  [[nodiscard]] static std::optional<std::pair<digest, std::string>> ready_at_members(
      ring& r, const std::string& ref, const std::atomic<bool>& stop,
      std::chrono::milliseconds wait = std::chrono::minutes(30));

 private:
  struct member {
    std::map<std::string, std::string> pending;  // ref → latest record JSON
    bool busy = false;
  };
  void send_next(const std::string& url);
  void tick();
  // Members as the ring has them now; a new one queues every own record.
  void follow_ring();

  ring& ring_;
  std::chrono::milliseconds retry_;
  records_fn own_records_;
  std::mutex mu_;
  std::map<std::string, member> members_;  // by URL; every member but self
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  metrics::counter* sent_ = nullptr;
  metrics::counter* failed_ = nullptr;
};

}  // namespace shoal::proxy

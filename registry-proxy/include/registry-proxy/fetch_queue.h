#pragma once
// fetch_queue: the upstream fetches waiting for a slot (blobs.h, torrent.fetch_concurrency).
// One lane per upstream, so a slow or flooded upstream never holds back another's fetches;
// within a lane the clients (addresses) that queued are served round robin, so one client's
// flood delays others by at most one fetch per turn. Bounded: at most `max_total` items, and at
// most `max_per_client` of one client; push() refuses beyond them. Not thread-safe (the blob
// service holds its mutex).

#include <algorithm>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shoal::proxy {

template <class T>
class fetch_queue {
 public:
  enum class pushed { queued, full, client_full };

  fetch_queue(std::size_t max_total, std::size_t max_per_client)
      : max_total_(max_total), max_per_client_(max_per_client) {}

  pushed push(const std::string& upstream, const std::string& client, T item) {
    if (size_ >= max_total_) return pushed::full;
    auto& n = per_client_[client];
    if (n >= max_per_client_) {
      if (n == 0) per_client_.erase(client);
      return pushed::client_full;
    }
    ++n;
    ++size_;
    auto& l = lanes_[upstream];
    auto& q = l.by_client[client];
    if (q.empty()) l.turn.push_back(client);
    q.push_back(std::move(item));
    return pushed::queued;
  }

  // The next item of `upstream`'s lane (round robin among its clients), or nothing.
  std::optional<T> pop(const std::string& upstream) {
    auto it = lanes_.find(upstream);
    if (it == lanes_.end()) return std::nullopt;
    auto& l = it->second;
    std::string client = l.turn.front();
    l.turn.pop_front();
    auto& q = l.by_client[client];
    T item = std::move(q.front());
    q.pop_front();
    if (q.empty())
      l.by_client.erase(client);
    else
      l.turn.push_back(client);
    if (l.turn.empty()) lanes_.erase(it);
    forget_one(client);
    return item;
  }

  // Takes `item` out wherever it waits; false when it was not queued.
  bool remove(const T& item) {
    for (auto lit = lanes_.begin(); lit != lanes_.end(); ++lit) {
      auto& l = lit->second;
      for (auto cit = l.by_client.begin(); cit != l.by_client.end(); ++cit) {
        auto& q = cit->second;
        auto pos = std::find(q.begin(), q.end(), item);
        if (pos == q.end()) continue;
        q.erase(pos);
        std::string client = cit->first;
        if (q.empty()) {
          l.by_client.erase(cit);
          l.turn.erase(std::find(l.turn.begin(), l.turn.end(), client));
          if (l.turn.empty()) lanes_.erase(lit);
        }
        forget_one(client);
        return true;
      }
    }
    return false;
  }

  // Every queued item (the queue is left empty).
  std::vector<T> drain() {
    std::vector<T> out;
    for (auto& [u, l] : lanes_)
      for (auto& [c, q] : l.by_client)
        for (auto& item : q) out.push_back(std::move(item));
    lanes_.clear();
    per_client_.clear();
    size_ = 0;
    return out;
  }

  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::size_t queued_by(const std::string& client) const {
    auto it = per_client_.find(client);
    return it == per_client_.end() ? 0 : it->second;
  }

 private:
  struct lane {
    std::deque<std::string> turn;  // clients with items here, next to be served first
    std::map<std::string, std::deque<T>> by_client;
  };
  void forget_one(const std::string& client) {
    --size_;
    auto it = per_client_.find(client);
    if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
  }

  std::size_t max_total_, max_per_client_;
  std::size_t size_ = 0;
  std::map<std::string, lane> lanes_;
  std::map<std::string, std::size_t> per_client_;
};

}  // namespace shoal::proxy

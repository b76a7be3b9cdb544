#pragma once
// lru_map: a map holding at most `capacity` entries; inserting beyond it drops the least
// recently used. For caches keyed by something a client chooses (a credential's hash, an
// address), whose size must not depend on how many distinct keys clients send. Not thread-safe
// (callers hold their own mutex).

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

namespace shoal::proxy {

template <class V>
class lru_map {
 public:
  explicit lru_map(std::size_t capacity) : capacity_(capacity ? capacity : 1) {}

  // The entry (now the most recently used), or null.
  V* find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Inserts or replaces; may drop the least recently used entry.
  V& put(const std::string& key, V value) {
    if (V* v = find(key)) {
      *v = std::move(value);
      return *v;
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }

  void erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  [[nodiscard]] std::size_t size() const { return order_.size(); }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  void set_capacity(std::size_t n) {
    capacity_ = n ? n : 1;
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

 private:
  using entry = std::pair<std::string, V>;
  std::size_t capacity_;
  std::list<entry> order_;  // most recently used first
  std::unordered_map<std::string, typename std::list<entry>::iterator> index_;
};

}  // namespace shoal::proxy

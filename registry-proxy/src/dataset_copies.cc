#include "dataset_copies.h"

#include <algorithm>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/origin_protocol.h"

namespace shoal::proxy {

dataset_copies::dataset_copies(ring& r, metrics::registry& reg,
                               std::chrono::milliseconds retry_interval, records_fn own_records)
    : ring_(r), retry_(retry_interval), own_records_(std::move(own_records)) {
  for (const auto& m : r.members())
    if (m.url != r.self()) members_[m.url];
  sent_ = &reg.counter("shoal_proxy_dataset_copies_sent_total",
                       "Dataset records copied to another ring member (accepted by it).")
               .with({});
  failed_ = &reg.counter("shoal_proxy_dataset_copies_failed_total",
                         "Dataset record copies a ring member did not accept (retried).")
                 .with({});
  reg.gauge_fn("shoal_proxy_dataset_copies_pending",
               "Dataset record copies waiting for a ring member (one per member and dataset).",
               [this] {
                 std::lock_guard lk(mu_);
                 std::size_t n = 0;
                 for (const auto& [u, m] : members_) n += m.pending.size();
                 return static_cast<double>(n);
               });
}

dataset_copies::~dataset_copies() { stop(); }

void dataset_copies::start(boost::asio::io_context& io) {
  timer_ = std::make_unique<boost::asio::steady_timer>(io);
  tick();
}

void dataset_copies::stop() {
  alive_->store(false);
  if (timer_) timer_->cancel();
}

void dataset_copies::push(const std::string& ref, const std::string& record_json) {
  std::vector<std::string> urls;
  {
    std::lock_guard lk(mu_);
    for (auto& [url, m] : members_) {
      m.pending[ref] = record_json;
      urls.push_back(url);
    }
  }
  for (const auto& u : urls) send_next(u);
}

void dataset_copies::send_next(const std::string& url) {
  if (!alive_->load()) return;
  std::string ref, body;
  {
    std::lock_guard lk(mu_);
    auto it = members_.find(url);
    if (it == members_.end()) return;  // it left the ring
    auto& m = it->second;
    if (m.busy || m.pending.empty()) return;
    m.busy = true;
    ref = m.pending.begin()->first;
    body = m.pending.begin()->second;
  }
  auto req =
      ring_.request(url, std::string(origin::paths::datasets) + "/" + ref + std::string(suffix));
  req.method = "PUT";
  req.body = body;
  req.headers.emplace_back("Content-Type", "application/json");
  req.max_retries = 0;
  // The receiver may fetch a large manifest from here before it answers.
  req.timeouts.total = std::chrono::minutes(5);
  http::callbacks cb;
  cb.on_data = [](std::string_view) { return true; };
  cb.on_complete = [this, url, ref, body, alive = alive_](result<http::completion> c) {
    if (!alive->load()) return;
    const bool ok = c && c->status / 100 == 2;
    bool more;
    {
      std::lock_guard lk(mu_);
      auto found = members_.find(url);
      if (found == members_.end()) return;  // it left the ring meanwhile
      auto& m = found->second;
      m.busy = false;
      if (ok) {
        auto it = m.pending.find(ref);
        if (it != m.pending.end() && it->second == body) m.pending.erase(it);
      }
      more = ok && !m.pending.empty();
    }
    if (ok) {
      sent_->inc();
    } else {
      failed_->inc();
      log::debug("dataset copy not accepted; retried", log::kv("member", url),
                 log::kv("dataset", ref),
                 log::kv("error", c ? "HTTP " + std::to_string(c->status) : c.error().message));
    }
    if (more) send_next(url);
  };
  ring_.client().submit(std::move(req), std::move(cb));
}

void dataset_copies::follow_ring() {
  std::vector<std::string> ring_urls;
  for (const auto& m : ring_.members())
    if (m.url != ring_.self()) ring_urls.push_back(m.url);
  std::vector<std::string> joined;
  {
    std::lock_guard lk(mu_);
    std::erase_if(members_, [&](const auto& e) {
      return std::find(ring_urls.begin(), ring_urls.end(), e.first) == ring_urls.end();
    });
    for (const auto& u : ring_urls)
      if (!members_.contains(u)) joined.push_back(u);
  }
  if (joined.empty()) return;
  auto records = own_records_ ? own_records_() : decltype(own_records_())();
  std::lock_guard lk(mu_);
  for (const auto& u : joined) {
    auto& m = members_[u];
    for (const auto& [ref, text] : records) m.pending.emplace(ref, text);
  }
}

void dataset_copies::tick() {
  if (!alive_->load()) return;
  follow_ring();
  std::vector<std::string> urls;
  for (const auto& m : ring_.members())
    if (m.up && m.url != ring_.self()) urls.push_back(m.url);
  for (const auto& u : urls) send_next(u);
  timer_->expires_after(retry_);
  timer_->async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !alive->load()) return;
    tick();
  });
}

std::optional<std::pair<digest, std::string>> dataset_copies::ready_at_members(
    ring& r, const std::string& ref, const std::atomic<bool>& stop,
    std::chrono::milliseconds wait) {
  const std::string base = std::string(origin::paths::datasets) + "/" + ref;
  // The member's own record: ready (with its manifest), still resolving, or anything else.
  auto status_at = [&](const std::string& url) -> std::optional<nlohmann::json> {
    auto st = r.request(url, base);
    st.timeouts.total = std::chrono::seconds(10);
    auto got = http::fetch(r.client(), std::move(st), 1u << 20);
    if (!got || (got->status != 200 && got->status != 202)) return std::nullopt;
    auto j = nlohmann::json::parse(got->body, nullptr, false);
    if (!j.is_object()) return std::nullopt;
    return j;
  };
  const auto until = std::chrono::steady_clock::now() + wait;
  for (const auto& m : r.members()) {
    if (m.url == r.self() || !m.up) continue;
    auto j = status_at(m.url);
    if (j && j->value("state", "") == "resolving") {
      log::info(
          "another ring member is resolving a dataset this replica was resolving when it "
          "stopped: waiting for its version",
          log::kv("dataset", ref), log::kv("member", m.url));
      while (j && j->value("state", "") == "resolving" && !stop.load() &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        j = status_at(m.url);
      }
    }
    if (!j || j->value("state", "") != "ready") continue;
    const auto md_field = j->find("manifest");
    if (md_field == j->end() || !md_field->is_string()) continue;
    auto md = digest::parse(md_field->get<std::string>());
    if (!md) continue;
    auto mq = r.request(m.url, base + "/manifest");
    mq.timeouts.total = std::chrono::minutes(4);
    auto text = http::fetch(r.client(), std::move(mq), 512u << 20);
    if (!text || text->status != 200) {
      log::warn(
          "a member holds a ready dataset but did not send its manifest", log::kv("dataset", ref),
          log::kv("member", m.url),
          log::kv("error", text ? "HTTP " + std::to_string(text->status) : text.error().message));
      continue;
    }
    return std::make_pair(*md, std::move(text->body));
  }
  return std::nullopt;
}

}  // namespace shoal::proxy

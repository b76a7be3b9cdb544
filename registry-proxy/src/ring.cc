#include "registry-proxy/ring.h"

#include <algorithm>

#include "common/log.h"
#include "common/sha256.h"

namespace shoal::proxy {

void describe(config::binder& b, ring_config& c) {
  b.field("members", c.members,
          "Base URL of every registry-proxy replica, this one's included, as the others reach it "
          "(e.g. the StatefulSet's https://shoal-registry-proxy-0.shoal-registry-proxy:5050). "
          "Each blob's owner (rendezvous hash of member and digest) fetches it upstream; the "
          "other replicas stream it from the owner. Empty: no ring, this replica fetches "
          "everything itself.");
  b.field("self", c.self,
          "This replica's entry of members (e.g. from the pod name). Required with members.");
  b.field("probe_interval", c.probe_interval,
          "How often every other member's /readyz is probed; a member that fails is skipped "
          "until a probe succeeds.",
          {.min = 100ms});
  b.field("probe_timeout", c.probe_timeout, "Deadline of one probe.", {.min = 50ms});
  b.field("connect_timeout", c.connect_timeout,
          "Connect timeout of requests to other members (probes and blob streams).", {.min = 50ms});
  b.field("stall_timeout", c.stall_timeout,
          "A blob stream from the owner with no bytes for this long is given up: the owner is "
          "marked down and the next member in the digest's order takes over, resuming with a "
          "Range request.",
          {.min = 200ms});
}

namespace {

bool valid_member_url(const std::string& u) {
  auto ep = http::parse_endpoint(u);
  if (!ep) return false;
  // scheme://host[:port] and nothing after it.
  auto rest = u.substr(u.find("://") + 3);
  return rest.find('/') == std::string::npos && rest.find('?') == std::string::npos;
}

}  // namespace

ring::ring(ring_config c, http::client& client) : cfg_(std::move(c)), client_(client) {
  for (const auto& m : cfg_.members) members_.push_back({m, true, {}});
}

ring::~ring() { stop(); }

result<std::unique_ptr<ring>> ring::create(const ring_config& c, http::client& client) {
  if (c.members.empty()) return fail(errc::invalid_argument, "ring.members is empty");
  std::vector<std::string> seen;
  for (const auto& m : c.members) {
    if (!valid_member_url(m)) {
      return fail(errc::invalid_argument,
                  "ring.members: " + m + " is not a base URL (http[s]://host[:port])");
    }
    if (std::find(seen.begin(), seen.end(), m) != seen.end())
      return fail(errc::invalid_argument, "ring.members lists " + m + " twice");
    seen.push_back(m);
  }
  if (std::find(c.members.begin(), c.members.end(), c.self) == c.members.end()) {
    return fail(errc::invalid_argument, "ring.self (" +
                                            (c.self.empty() ? std::string("empty") : c.self) +
                                            ") must be one of ring.members");
  }
  return std::unique_ptr<ring>(new ring(c, client));
}

std::uint64_t ring::score(std::string_view member, std::string_view key) {
  std::string in;
  in.reserve(member.size() + key.size() + 1);
  in.append(member).push_back('\n');
  in.append(key);
  auto d = sha256_of(in);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d.bytes()[static_cast<std::size_t>(i)];
  return v;
}

std::string ring::owner(std::string_view key) const {
  std::lock_guard lk(mu_);
  const std::string* best = &cfg_.self;
  std::uint64_t best_score = score(cfg_.self, key);
  for (const auto& m : members_) {
    if (!m.up || m.url == cfg_.self) continue;
    auto s = score(m.url, key);
    if (s > best_score || (s == best_score && m.url < *best)) {
      best = &m.url;
      best_score = s;
    }
  }
  return *best;
}

bool ring::is_member(std::string_view url) const {
  return std::find(cfg_.members.begin(), cfg_.members.end(), url) != cfg_.members.end();
}

void ring::set_state(std::size_t i, bool up, const std::string& why) {
  bool changed;
  std::string url;
  {
    std::lock_guard lk(mu_);
    auto& m = members_[i];
    changed = m.up != up;
    m.up = up;
    if (!up) m.last_error = why;
    url = m.url;
  }
  if (!changed) return;
  if (up)
    log::info("ring member up", log::kv("member", url));
  else
    log::warn("ring member down", log::kv("member", url), log::kv("reason", why));
}

void ring::mark_down(const std::string& member, const std::string& why) {
  if (member == cfg_.self) return;
  for (std::size_t i = 0; i < cfg_.members.size(); ++i) {
    if (cfg_.members[i] == member) set_state(i, false, why);
  }
}

std::vector<ring::member_state> ring::members() const {
  std::lock_guard lk(mu_);
  return members_;
}

std::size_t ring::up_count() const {
  std::lock_guard lk(mu_);
  return static_cast<std::size_t>(
      std::count_if(members_.begin(), members_.end(), [](const auto& m) { return m.up; }));
}

http::client_request ring::request(const std::string& member, const std::string& path) const {
  http::client_request r;
  r.url = member + path;
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.stall_timeout.get());
  r.headers.emplace_back(std::string(from_header), cfg_.self);
  // A replica that is gone stays gone for a while: one quick retry, then the next member.
  r.max_retries = 1;
  r.redirects.max_redirects = 0;
  return r;
}

void ring::start(boost::asio::io_context& io) {
  timer_ = std::make_unique<boost::asio::steady_timer>(io);
  probe_round();
}

void ring::stop() {
  alive_->store(false);
  if (timer_) timer_->cancel();
}

void ring::probe_round() {
  if (!alive_->load()) return;
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.probe_timeout.get());
  for (std::size_t i = 0; i < cfg_.members.size(); ++i) {
    if (cfg_.members[i] == cfg_.self) continue;
    auto req = request(cfg_.members[i], "/readyz");
    req.max_retries = 0;
    req.timeouts.total = timeout;
    req.timeouts.connect = std::min(req.timeouts.connect, timeout);
    http::callbacks cb;
    cb.on_complete = [this, i, alive = alive_](result<http::completion> r) {
      if (!alive->load()) return;
      if (!r) {
        stats_.probe_failures.fetch_add(1);
        return set_state(i, false, "probe: " + r.error().message);
      }
      if (r->status != 200) {
        stats_.probe_failures.fetch_add(1);
        return set_state(i, false, "probe: /readyz answered HTTP " + std::to_string(r->status));
      }
      set_state(i, true, {});
    };
    client_.submit(std::move(req), std::move(cb));
  }
  timer_->expires_after(
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.probe_interval.get()));
  timer_->async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !alive->load()) return;
    probe_round();
  });
}

}  // namespace shoal::proxy

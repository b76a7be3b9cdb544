#include "registry-proxy/ring.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/sha256.h"
#include "common/json_text.h"

namespace shoal::proxy {

void describe(config::binder& b, ring_config& c) {
  b.field("members", c.members,
          "Base URL of every registry-proxy replica, this one's included, as the others reach it "
          "(e.g. the StatefulSet's https://shoal-registry-proxy-0.shoal-registry-proxy:5050). "
          "Each blob's owner (rendezvous hash of member and digest) fetches it upstream; the "
          "other replicas stream it from the owner. Empty: no ring, this replica fetches "
          "everything itself.");
  b.field("self", c.self,
          "This replica's entry of members (e.g. from the pod name). Required with members or "
          "schedulers.");
  b.field("schedulers", c.schedulers,
          "Scheduler base URLs (one scheduler's replicas, tried in turn). Every probe_interval "
          "this replica announces `self` there (POST /v1/origins) and every replica the answer "
          "lists joins the ring beside `members`; a replica that stops announcing leaves it once "
          "the scheduler forgets it (its tracker.origin_members_ttl). With TLS the call presents "
          "this replica's certificate. Empty: the ring is `members` alone.");
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
  if (std::find(cfg_.members.begin(), cfg_.members.end(), cfg_.self) == cfg_.members.end())
    cfg_.members.push_back(cfg_.self);
  for (const auto& m : cfg_.members) members_.push_back({m, true, {}});
}

ring::~ring() { stop(); }

result<std::unique_ptr<ring>> ring::create(const ring_config& c, http::client& client) {
  if (c.members.empty() && c.schedulers.empty())
    return fail(errc::invalid_argument, "ring.members and ring.schedulers are both empty");
  for (const auto& s : c.schedulers) {
    if (!valid_member_url(s))
      return fail(errc::invalid_argument,
                  "ring.schedulers: " + s + " is not a base URL (http[s]://host[:port])");
  }
  if (c.members.empty()) {
    if (!valid_member_url(c.self)) {
      return fail(errc::invalid_argument,
                  "ring.self (" + (c.self.empty() ? std::string("empty") : c.self) +
                      ") must be this replica's base URL (http[s]://host[:port])");
    }
    return std::unique_ptr<ring>(new ring(c, client));
  }
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
  std::lock_guard lk(mu_);
  return std::any_of(members_.begin(), members_.end(), [&](const auto& m) { return m.url == url; });
}

void ring::set_announced(const std::vector<std::string>& urls) {
  constexpr std::size_t max_announced = 64;
  std::vector<std::string> joined, left;
  {
    std::lock_guard lk(mu_);
    std::vector<std::string> want;
    for (const auto& u : urls) {
      if (want.size() >= max_announced) break;
      if (!valid_member_url(u)) continue;
      if (std::find(cfg_.members.begin(), cfg_.members.end(), u) != cfg_.members.end()) continue;
      if (std::find(want.begin(), want.end(), u) == want.end()) want.push_back(u);
    }
    std::erase_if(members_, [&](const member_state& m) {
      bool keep =
          std::find(cfg_.members.begin(), cfg_.members.end(), m.url) != cfg_.members.end() ||
          std::find(want.begin(), want.end(), m.url) != want.end();
      if (!keep) left.push_back(m.url);
      return !keep;
    });
    for (const auto& u : want) {
      if (std::none_of(members_.begin(), members_.end(),
                       [&](const auto& m) { return m.url == u; })) {
        members_.push_back({u, true, {}});
        joined.push_back(u);
      }
    }
  }
  for (const auto& u : joined) log::info("ring member joined", log::kv("member", u));
  for (const auto& u : left)
    log::warn("ring member left (no longer announced)", log::kv("member", u));
}

void ring::set_state(const std::string& member, bool up, const std::string& why) {
  bool changed = false;
  std::string url;
  {
    std::lock_guard lk(mu_);
    for (auto& m : members_) {
      if (m.url != member) continue;
      changed = m.up != up;
      m.up = up;
      if (!up) m.last_error = why;
      url = m.url;
    }
  }
  if (!changed) return;
  if (up)
    log::info("ring member up", log::kv("member", url));
  else
    log::warn("ring member down", log::kv("member", url), log::kv("reason", why));
}

void ring::mark_down(const std::string& member, const std::string& why) {
  if (member == cfg_.self) return;
  set_state(member, false, why);
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
  if (!cfg_.schedulers.empty()) announce();
  std::vector<std::string> urls;
  {
    std::lock_guard lk(mu_);
    for (const auto& m : members_)
      if (m.url != cfg_.self) urls.push_back(m.url);
  }
  for (const auto& url : urls) {
    auto req = request(url, "/readyz");
    req.max_retries = 0;
    req.timeouts.total = timeout;
    req.timeouts.connect = std::min(req.timeouts.connect, timeout);
    http::callbacks cb;
    cb.on_complete = [this, url, alive = alive_](result<http::completion> r) {
      if (!alive->load()) return;
      if (!r) {
        stats_.probe_failures.fetch_add(1);
        return set_state(url, false, "probe: " + r.error().message);
      }
      if (r->status != 200) {
        stats_.probe_failures.fetch_add(1);
        return set_state(url, false, "probe: /readyz answered HTTP " + std::to_string(r->status));
      }
      set_state(url, true, {});
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

// POST <scheduler>/v1/origins {"url": self}: the answer's members join the ring. A scheduler that
// fails is left for the next in the list at the next round; the ring keeps the members it has
// meanwhile (the scheduler's TTL, not a failed call, removes one).
void ring::announce() {
  std::string base;
  {
    std::lock_guard lk(mu_);
    base = cfg_.schedulers[next_scheduler_ % cfg_.schedulers.size()];
  }
  http::client_request req;
  req.method = "POST";
  req.url = base + "/v1/origins";
  req.body = json_text(nlohmann::json{{"url", cfg_.self}});
  req.headers.emplace_back("Content-Type", "application/json");
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.probe_timeout.get());
  req.timeouts.connect = std::min(
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.connect_timeout.get()), timeout);
  req.timeouts.total = timeout;
  req.max_retries = 0;
  req.redirects.max_redirects = 0;
  auto body = std::make_shared<std::string>();
  http::callbacks cb;
  cb.on_data = [body](std::string_view c) {
    if (body->size() + c.size() > (256u << 10)) return false;  // 64 URLs are far less
    body->append(c);
    return true;
  };
  cb.on_complete = [this, base, body, alive = alive_](result<http::completion> r) {
    if (!alive->load()) return;
    std::string why;
    std::vector<std::string> urls;
    if (!r) {
      why = r.error().message;
    } else if (r->status != 200) {
      why = "HTTP " + std::to_string(r->status) + ": " + body->substr(0, 300);
    } else {
      auto j = nlohmann::json::parse(*body, nullptr, false);
      const auto m = j.is_object() ? j.find("members") : j.end();
      if (!j.is_object() || m == j.end() || !m->is_array()) {
        why = "the answer has no \"members\" list";
      } else {
        for (const auto& u : *m)
          if (u.is_string()) urls.push_back(u.get<std::string>());
      }
    }
    if (!why.empty()) stats_.announce_failures.fetch_add(1);
    bool was_failing;
    {
      std::lock_guard lk(mu_);
      was_failing = announce_failing_;
      announce_failing_ = !why.empty();
      if (!why.empty()) ++next_scheduler_;
    }
    if (!why.empty()) {
      if (!was_failing)
        log::warn("cannot announce this replica to the scheduler; the ring keeps its members",
                  log::kv("scheduler", base), log::kv("error", why));
      return;
    }
    if (was_failing) log::info("announcing to the scheduler again", log::kv("scheduler", base));
    set_announced(urls);
  };
  client_.submit(std::move(req), std::move(cb));
}

}  // namespace shoal::proxy

#include "scheduler/tracker.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

#include "common/bencode.h"
#include "common/log.h"

namespace shoal::scheduler {
namespace {

bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Node names and topology labels: short printable tokens.
bool valid_label(std::string_view s) {
  if (s.size() > 128) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == ':' || c == '/')) {
      return false;
    }
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// A peer in compact form: the address bytes, then the port in network order.
void append_compact(std::string& out, const unsigned char* addr, std::size_t len,
                    std::uint16_t port) {
  out.append(reinterpret_cast<const char*>(addr), len);
  out += static_cast<char>(port >> 8);
  out += static_cast<char>(port & 0xff);
}

}  // namespace

result<announce_request> parse_announce(const http::request& req, const std::string& source_ip,
                                        const tracker_options& opts) {
  announce_request a;
  auto need_20 = [&](const char* name, std::array<std::uint8_t, 20>& out) -> status {
    auto v = req.query_param(name);
    if (!v) return fail(errc::invalid_argument, std::string("missing or malformed ") + name);
    if (v->size() != 20) {
      return fail(errc::invalid_argument,
                  std::string(name) + " must be 20 bytes, got " + std::to_string(v->size()));
    }
    std::copy(v->begin(), v->end(), out.begin());
    return {};
  };
  if (auto s = need_20("info_hash", a.info_hash); !s) return fail(s.error());
  if (auto s = need_20("peer_id", a.peer_id); !s) return fail(s.error());
  auto port = req.query_param("port");
  std::uint64_t p = 0;
  if (!port || !parse_u64(*port, p) || p == 0 || p > 65535) {
    return fail(errc::invalid_argument,
                "port must be 1-65535, got \"" + printable(port.value_or("")) + "\"");
  }
  a.port = static_cast<std::uint16_t>(p);
  for (auto [name, field] : {std::pair{"uploaded", &a.uploaded},
                             std::pair{"downloaded", &a.downloaded}, std::pair{"left", &a.left}}) {
    auto v = req.query_param(name);
    if (v && !parse_u64(*v, *field)) {
      return fail(errc::invalid_argument,
                  std::string(name) + " is not a number: \"" + printable(*v) + "\"");
    }
  }
  if (auto ev = req.query_param("event")) {
    if (*ev == "started")
      a.event = announce_request::event_t::started;
    else if (*ev == "completed")
      a.event = announce_request::event_t::completed;
    else if (*ev == "stopped")
      a.event = announce_request::event_t::stopped;
    else if (ev->empty() || *ev == "paused")
      a.event = announce_request::event_t::none;
    else
      return fail(errc::invalid_argument, "unknown event \"" + printable(*ev) + "\"");
  }
  a.numwant = opts.default_numwant;
  if (auto nw = req.query_param("numwant")) {
    std::uint64_t n = 0;
    if (!parse_u64(*nw, n)) return fail(errc::invalid_argument, "numwant is not a number");
    a.numwant = static_cast<std::uint32_t>(std::min<std::uint64_t>(n, opts.max_numwant));
  }
  if (auto c = req.query_param("compact")) a.compact = *c != "0";
  for (auto [name, field] :
       {std::pair{"node", &a.node}, std::pair{"zone", &a.zone}, std::pair{"rack", &a.rack}}) {
    if (auto v = req.query_param(name)) {
      if (!valid_label(*v))
        return fail(errc::invalid_argument, std::string(name) + " has invalid characters");
      *field = *v;
    }
  }
  if (auto role = req.query_param("role")) {
    if (*role == "origin")
      a.origin = true;
    else if (*role != "peer")
      return fail(errc::invalid_argument, "role must be peer or origin");
  }
  a.ip = source_ip;
  if (opts.trust_announced_ip) {
    auto ip = req.query_param("ip");
    if (!ip) ip = req.query_param("ipv4");
    if (ip) {
      unsigned char buf[16];
      if (inet_pton(AF_INET, ip->c_str(), buf) != 1 && inet_pton(AF_INET6, ip->c_str(), buf) != 1) {
        return fail(errc::invalid_argument, "ip is not an address: \"" + printable(*ip) + "\"");
      }
      // With TLS on the node's address is the connection's: a claim is only logged.
      if (req.peer.tls && *ip != source_ip) {
        log::debug("announced ip ignored: TLS is on", log::kv("claimed", printable(*ip)),
                   log::kv("from", source_ip));
      } else {
        a.ip = *ip;
      }
    }
  }
  return a;
}

tracker::tracker(tracker_options opts, std::function<clock::time_point()> now)
    : opts_(opts), now_(std::move(now)) {}

std::string tracker::failure(const std::string& why) const {
  bencode::dict d;
  d["failure reason"] = why;
  d["min interval"] = static_cast<std::int64_t>(opts_.min_interval.count());
  return bencode::encode(bencode::value(std::move(d)));
}

namespace {
// std::push_heap keeps the greatest first: "greater" puts the earliest due first.
template <class E>
bool later(const E& a, const E& b) {
  return a.due > b.due;
}
}  // namespace

tracker::peer& tracker::peer_locked(swarm& sw, const std::string& key) {
  auto [it, fresh] = sw.peers.try_emplace(key);
  if (fresh) ++peer_count_;
  return it->second;
}

void tracker::erase_peer_locked(swarm_map::iterator sw, std::map<std::string, peer>::iterator p) {
  sw->second.peers.erase(p);
  --peer_count_;
  if (sw->second.peers.empty()) swarms_.erase(sw);
}

void tracker::drop_holding_locked(const std::array<std::uint8_t, 20>& info_hash,
                                  const std::string& key, clock::time_point seen_before) {
  auto sw = swarms_.find(info_hash);
  if (sw == swarms_.end()) return;
  auto p = sw->second.peers.find(key);
  if (p != sw->second.peers.end() && p->second.holder && p->second.last_seen < seen_before)
    erase_peer_locked(sw, p);
}

void tracker::schedule_locked(const std::array<std::uint8_t, 20>& info_hash, const std::string& key,
                              peer& p, clock::time_point due) {
  if (p.ticket != 0) return;
  // Entries of peers that left another way wait for their due time; an announce flood that
  // creates and stops peers faster than that must not grow the queue without bound.
  if (expiries_.size() > 2 * peer_count_ + 1024) {
    std::erase_if(expiries_, [&](const expiry& e) {
      auto sw = swarms_.find(e.info_hash);
      if (sw == swarms_.end()) return true;
      auto q = sw->second.peers.find(e.key);
      return q == sw->second.peers.end() || q->second.ticket != e.id;
    });
    std::make_heap(expiries_.begin(), expiries_.end(), later<expiry>);
  }
  p.ticket = next_ticket_++;
  expiries_.push_back({due, p.ticket, info_hash, key});
  std::push_heap(expiries_.begin(), expiries_.end(), later<expiry>);
}

// A peer leaves peer_timeout after it was last seen: by its announces, and for a holder also by
// its node's heartbeats (holder_seen_). Holders whose node went silent are found through what
// the node reported; announced peers through expiries_, each looked at when it is due.
void tracker::expire_locked(clock::time_point now) {
  const auto timeout = opts_.peer_timeout;
  for (auto it = holder_seen_.begin(); it != holder_seen_.end();) {
    if (now - it->second <= timeout) {
      ++it;
      continue;
    }
    if (auto h = holdings_.find(it->first); h != holdings_.end()) {
      // A holder refreshed by a later announce ("stopped" for a held object) stays: it has a
      // ticket.
      for (const auto& ih : h->second) drop_holding_locked(ih, it->first, now - timeout);
      holdings_.erase(h);
    }
    it = holder_seen_.erase(it);
  }
  while (!expiries_.empty() && expiries_.front().due < now) {
    std::pop_heap(expiries_.begin(), expiries_.end(), later<expiry>);
    expiry e = std::move(expiries_.back());
    expiries_.pop_back();
    auto sw = swarms_.find(e.info_hash);
    if (sw == swarms_.end()) continue;
    auto p = sw->second.peers.find(e.key);
    if (p == sw->second.peers.end() || p->second.ticket != e.id) continue;
    auto& pe = p->second;
    pe.ticket = 0;
    auto seen = pe.last_seen;
    if (pe.holder) {
      if (auto h = holder_seen_.find(e.key); h != holder_seen_.end())
        seen = std::max(seen, h->second);
    }
    if (now - seen > timeout)
      erase_peer_locked(sw, p);
    else
      schedule_locked(e.info_hash, e.key, pe, seen + timeout);
  }
  last_expire_ = now;
}

void tracker::expire() {
  std::lock_guard lk(mu_);
  expire_locked(now_());
}

void tracker::record_locked(swarm& sw, const std::string& key, const announce_request& a,
                            clock::time_point now) {
  if (a.event == announce_request::event_t::stopped) {
    // peerd replaces a finished download's torrent with a seed of the same info-hash (a new
    // torrent, a new peer id): the old torrent's "stopped" and the seed's first announce race, and
    // a stop that arrives second must not take the seed out of the swarm (with SSL torrents only
    // announced peers are handed out, so the seed would be hidden until its next announce).
    if (auto p = sw.peers.find(key); p != sw.peers.end() && p->second.announced) {
      static constexpr std::array<std::uint8_t, 20> unknown{};
      const auto& was = p->second.peer_id;
      if (was != unknown && a.peer_id != unknown && was != a.peer_id) {
        ++stats_.stale_stops;
        return;
      }
    }
    auto h = holdings_.find(key);
    if (h != holdings_.end() && h->second.count(a.info_hash)) {
      auto& p = peer_locked(sw, key);
      p.holder = true;
      p.announced = false;
      p.left = 0;
      p.last_seen = now;
      schedule_locked(a.info_hash, key, p, now + opts_.peer_timeout);
    } else if (auto p = sw.peers.find(key); p != sw.peers.end()) {
      sw.peers.erase(p);  // (the caller erases the swarm when it is left empty)
      --peer_count_;
    }
    return;
  }
  auto& p = peer_locked(sw, key);
  p.node = a.node;
  p.zone = a.zone;
  p.rack = a.rack;
  p.ip = a.ip;
  p.port = a.port;
  if (a.event == announce_request::event_t::completed || (p.left > 0 && a.left == 0))
    ++sw.completed;
  p.left = a.left;
  p.origin = a.origin;
  p.holder = false;
  p.announced = true;
  p.peer_id = a.peer_id;
  p.last_seen = now;
  schedule_locked(a.info_hash, key, p, now + opts_.peer_timeout);
}

tracker::peer_pick tracker::pick_peers_locked(swarm& sw, const std::string& key,
                                              const announce_request& a, clock::time_point now) {
  // Rank every other peer; lower tuple sorts first.
  struct cand {
    int seed_rank, topo_rank;
    std::size_t load;
    std::uint64_t left;
    peer* p;
  };
  std::vector<cand> cands;
  cands.reserve(sw.peers.size());
  peer_pick out;
  for (auto& [k, p] : sw.peers) {
    if (p.left == 0)
      ++out.complete;
    else
      ++out.incomplete;
    if (k == key || (!a.node.empty() && p.node == a.node)) continue;
    if (opts_.announced_peers_only && !p.announced) continue;
    // A complete requester only needs peers it can upload to.
    if (a.left == 0 && p.left == 0) continue;
    // Forget old handouts (the load estimate decays over the window).
    auto& h = p.handouts;
    h.erase(std::remove_if(h.begin(), h.end(), [&](auto t) { return now - t > opts_.load_window; }),
            h.end());
    int topo = 2;
    if (!a.rack.empty() && p.rack == a.rack && p.zone == a.zone)
      topo = 0;
    else if (!a.zone.empty() && p.zone == a.zone)
      topo = 1;
    cands.push_back({p.left == 0 ? 0 : 1, topo, h.size(), p.left, &p});
  }
  std::sort(cands.begin(), cands.end(), [](const cand& x, const cand& y) {
    return std::tie(x.seed_rank, x.topo_rank, x.load, x.left) <
           std::tie(y.seed_rank, y.topo_rank, y.load, y.left);
  });
  std::size_t want = a.event == announce_request::event_t::stopped ? 0 : a.numwant;
  // Origins always make the list, even when numwant is small.
  for (auto& c : cands) {
    if (c.p->origin) out.chosen.push_back(c.p);
  }
  for (auto& c : cands) {
    if (out.chosen.size() >= want) break;
    if (!c.p->origin) out.chosen.push_back(c.p);
  }
  if (want == 0) out.chosen.clear();
  return out;
}

void tracker::add_peers(bencode::dict& d, const std::vector<peer*>& chosen,
                        const announce_request& a, clock::time_point now) {
  std::string peers4, peers6;
  bencode::list plist;
  for (auto* p : chosen) {
    // Handouts to downloaders count as load on the peer handed out (it will be asked for data).
    if (a.left > 0) p->handouts.push_back(now);
    if (a.compact) {
      unsigned char buf[16];
      if (inet_pton(AF_INET, p->ip.c_str(), buf) == 1)
        append_compact(peers4, buf, 4, p->port);
      else if (inet_pton(AF_INET6, p->ip.c_str(), buf) == 1)
        append_compact(peers6, buf, 16, p->port);
    } else {
      bencode::dict pd;
      pd["ip"] = p->ip;
      pd["port"] = static_cast<std::int64_t>(p->port);
      plist.emplace_back(std::move(pd));
    }
  }
  if (a.compact) {
    d["peers"] = std::move(peers4);
    if (!peers6.empty()) d["peers6"] = std::move(peers6);
  } else {
    d["peers"] = std::move(plist);
  }
}

tracker::swarm* tracker::admit_locked(const std::array<std::uint8_t, 20>& info_hash,
                                      const std::string& key) {
  auto it = swarms_.find(info_hash);
  if (it == swarms_.end()) {
    if (swarms_.size() >= opts_.max_swarms || opts_.max_peers_per_swarm == 0) return nullptr;
    return &swarms_[info_hash];
  }
  auto& sw = it->second;
  if (sw.peers.size() >= opts_.max_peers_per_swarm && !sw.peers.count(key)) return nullptr;
  return &sw;
}

announce_answer tracker::answer(const announce_request& a) {
  auto now = now_();
  std::lock_guard lk(mu_);
  ++stats_.announces;
  if (now - last_expire_ > std::chrono::seconds(10)) expire_locked(now);
  std::string key = a.ip + ":" + std::to_string(a.port);
  swarm* admitted = admit_locked(a.info_hash, key);
  if (!admitted && a.event != announce_request::event_t::stopped) {
    ++stats_.refused_announces;
    bool new_swarm = !swarms_.count(a.info_hash);
    return {429, failure(new_swarm ? "tracker full: " + std::to_string(swarms_.size()) +
                                         " swarms (tracker.max_swarms)"
                                   : "swarm full: " + std::to_string(opts_.max_peers_per_swarm) +
                                         " peers (tracker.max_peers_per_swarm)")};
  }
  // A "stopped" peer that is not in the swarm leaves nothing behind: it is answered from an
  // empty scratch swarm that is never stored.
  swarm scratch;
  auto& sw = admitted ? *admitted : scratch;
  if (admitted) record_locked(sw, key, a, now);
  auto pick = pick_peers_locked(sw, key, a, now);

  bencode::dict d;
  auto interval = a.left == 0 ? opts_.seed_interval : opts_.interval;
  d["interval"] = static_cast<std::int64_t>(interval.count());
  d["min interval"] = static_cast<std::int64_t>(opts_.min_interval.count());
  d["complete"] = pick.complete;
  d["incomplete"] = pick.incomplete;
  d["downloaded"] = static_cast<std::int64_t>(sw.completed);
  add_peers(d, pick.chosen, a, now);
  if (admitted && sw.peers.empty()) swarms_.erase(a.info_hash);
  return {200, bencode::encode(bencode::value(std::move(d)))};
}

std::size_t tracker::set_holdings(const std::string& node, const std::string& ip,
                                  std::uint16_t port, const std::string& zone,
                                  const std::string& rack,
                                  const std::vector<std::array<std::uint8_t, 20>>& info_hashes,
                                  bool full) {
  auto now = now_();
  std::lock_guard lk(mu_);
  std::string key = ip + ":" + std::to_string(port);
  holder_seen_[key] = now;
  auto& held = holdings_[key];
  std::set<std::array<std::uint8_t, 20>> before;
  if (full) before.swap(held);
  for (const auto& ih : info_hashes) held.insert(ih);
  std::size_t skipped = 0;
  for (const auto& ih : info_hashes) {
    swarm* sw = admit_locked(ih, key);
    if (!sw) {
      ++skipped;
      continue;
    }
    auto& p = peer_locked(*sw, key);
    if (p.node.empty()) p.node = node;
    p.zone = zone;
    p.rack = rack;
    p.ip = ip;
    p.port = port;
    p.left = 0;
    p.holder = true;
    p.last_seen = now;
  }
  stats_.skipped_holdings += skipped;
  if (!full) return skipped;
  // What the node reported before and no longer lists: its holder entries go.
  for (const auto& ih : before) {
    if (!held.count(ih)) drop_holding_locked(ih, key);
  }
  return skipped;
}

void tracker::remove_holdings(const std::string& ip, std::uint16_t port,
                              const std::vector<std::array<std::uint8_t, 20>>& info_hashes) {
  std::lock_guard lk(mu_);
  std::string key = ip + ":" + std::to_string(port);
  auto held = holdings_.find(key);
  for (const auto& ih : info_hashes) {
    if (held != holdings_.end()) held->second.erase(ih);
    drop_holding_locked(ih, key);
  }
}

void tracker::drop_holder(const std::string& ip, std::uint16_t port) {
  std::lock_guard lk(mu_);
  std::string key = ip + ":" + std::to_string(port);
  if (auto h = holdings_.find(key); h != holdings_.end()) {
    for (const auto& ih : h->second) drop_holding_locked(ih, key);
    holdings_.erase(h);
  }
  holder_seen_.erase(key);
}

std::string authorize_announce(announce_request& a, const tls::peer_identity& peer) {
  if (!peer.tls) return {};  // plain mode: no identities (tls.enabled: false)
  if (a.origin) {
    if (peer.is(tls::peer_role::registry_proxy)) return {};
    return "role=origin needs registry-proxy's certificate; the client certificate is " +
           peer.str();
  }
  if (!peer.is(tls::peer_role::node))
    return "announces need a node certificate; the client certificate is " + peer.str();
  if (a.node.empty()) {
    a.node = peer.name;  // the certificate says who it is
    return {};
  }
  if (a.node != peer.name) {
    return "announce for node \"" + a.node + "\" refused: the client certificate is " + peer.str();
  }
  return {};
}

http::response tracker::handle(const http::request& req) {
  std::string src = req.remote.address().to_string();
  auto a = parse_announce(req, src, opts_);
  if (!a) {
    {
      std::lock_guard lk(mu_);
      ++stats_.bad_announces;
    }
    log::debug("bad announce", log::kv("from", src), log::kv("error", a.error().message));
    return http::response::text(400, failure(a.error().message), "text/plain");
  }
  if (auto why = authorize_announce(*a, req.peer); !why.empty()) {
    {
      std::lock_guard lk(mu_);
      ++stats_.unauthorized_announces;
    }
    log::warn("announce refused", log::kv("from", src), log::kv("node", a->node),
              log::kv("certificate", req.peer.str()), log::kv("reason", why));
    return http::response::text(403, failure(why), "text/plain");
  }
  auto ans = answer(*a);
  if (ans.status != 200) {
    log::debug("announce refused", log::kv("from", src), log::kv("status", ans.status));
  } else if (observer_) {
    observer_(*a);
  }
  return http::response::text(ans.status, std::move(ans.body), "text/plain");
}

void tracker::record(const announce_request& a) {
  auto now = now_();
  std::lock_guard lk(mu_);
  std::string key = a.ip + ":" + std::to_string(a.port);
  swarm* sw = admit_locked(a.info_hash, key);
  if (sw == nullptr) return;
  record_locked(*sw, key, a, now);
  if (sw->peers.empty()) swarms_.erase(a.info_hash);
}

tracker_stats tracker::stats() const {
  std::lock_guard lk(mu_);
  tracker_stats s = stats_;
  s.swarms = swarms_.size();
  s.peers = peer_count_;
  return s;
}

std::vector<std::string> tracker::nodes_in(const std::array<std::uint8_t, 20>& info_hash) const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  auto it = swarms_.find(info_hash);
  if (it == swarms_.end()) return out;
  for (const auto& [k, p] : it->second.peers) out.push_back(p.node.empty() ? k : p.node);
  return out;
}

}  // namespace shoal::scheduler

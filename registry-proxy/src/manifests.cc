#include "registry-proxy/manifests.h"

#include <boost/asio/post.hpp>

#include <algorithm>

#include "registry-proxy/blobs.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/sha256.h"
#include "common/text.h"

namespace shoal::proxy {
namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string strip_params(std::string_view v) {
  auto semi = v.find(';');
  std::string s(v.substr(0, semi));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

http::response manifest_error(unsigned status, const std::string& message,
                              const std::string& retry_after) {
  return origin::upstream_failure(status, message, retry_after, oci::error_code::manifest_unknown,
                                  basic_challenge);
}

}  // namespace

std::string manifest_service::normalize_accept(std::string_view accept) {
  // The manifest types registry-proxy knows, in a fixed order: the key is the subset the client
  // named, so however the header is spelled (order, parameters, other types) at most 2^5 keys
  // exist per tag.
  static constexpr std::string_view known[] = {
      oci::media::oci_index, oci::media::docker_manifest_list, oci::media::oci_manifest,
      oci::media::docker_manifest, oci::media::docker_manifest_v1_signed};
  unsigned mask = 0;
  std::size_t start = 0;
  while (start <= accept.size()) {
    auto comma = accept.find(',', start);
    auto part = strip_params(accept.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    for (std::size_t i = 0; i < std::size(known); ++i) {
      if (part == known[i]) mask |= 1u << i;
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::string out;
  for (std::size_t i = 0; i < std::size(known); ++i) {
    if (!(mask & (1u << i))) continue;
    if (!out.empty()) out += ", ";
    out += known[i];
  }
  return out;
}

void manifest_service::serve(const selection& sel, const oci::manifest_ref& ref,
                             const credential& cred, std::string accept, bool head,
                             http::responder resp, std::string ring_from) {
  // A member's request runs on threads of its own: it only ever waits for upstream, so the
  // workers of two members each waiting for the other (their own clients' requests forwarded to
  // the other) cannot also hold up the requests that would answer them.
  auto& pool = ring_from.empty() ? pool_ : ring_pool_;
  auto j = std::make_shared<job>(
      job{sel, ref, cred, std::move(accept), head, std::move(resp), std::move(ring_from)});
  boost::asio::post(pool, [this, j, &pool] { run(j, pool, nullptr); });
}

void manifest_service::run(const std::shared_ptr<job>& j, boost::asio::thread_pool& pool,
                           const resume* resumed) {
  // Parked on a flight: the flight's end posts this request again, to the same threads.
  park_fn park = [this, j, &pool](const resume& at) {
    at.f->parked.push_back([this, j, &pool, at] {
      boost::asio::post(pool, [this, j, &pool, at] { run(j, pool, &at); });
    });
  };
  auto r = respond(j->sel, j->ref, j->cred, j->accept, j->head, j->ring_from, park, resumed);
  if (r) j->resp.send(std::move(*r));
}

http::response manifest_service::answer(const selection& sel, const oci::manifest_ref& ref,
                                        const credential& cred, const std::string& accept,
                                        bool head, const std::string& ring_from) {
  return *respond(sel, ref, cred, accept, head, ring_from, {}, nullptr);
}

std::string manifest_service::ring_key(const want& w) {
  return w.is_tag ? "manifest:" + w.sel.up->cfg.name + "/" + w.sel.repo + ":" + w.ref : w.ref;
}

std::optional<manifest_service::fetched> manifest_service::obtain(const want& w,
                                                                  const credential& cred,
                                                                  const park_fn& park,
                                                                  const resume* resumed) {
  // Where from: the ring's owner of the manifest, or upstream (this replica owns it, or a member
  // asks: never forwarded again).
  const std::string repo_key = w.sel.up->cfg.name + "/" + w.sel.repo;
  std::string owner;
  if (ring_ && w.ring_from.empty()) {
    owner = ring_->owner(ring_key(w));
    if (owner == ring_->self()) owner.clear();
  }
  // One flight per manifest, accepted types and source; a waiter whose credential differs from
  // the leader's takes only a public answer, else it flies on its own (keyed by its credential).
  // Flights that go upstream and flights that ask the owner never share a key: two members that
  // disagree on the owner each answer the other's request from upstream instead of waiting for
  // their own request to the other.
  const std::string base =
      (owner.empty() ? "upstream|" : "ring|") + repo_key + "|" + w.ref + "|" + w.accept;
  for (int k = resumed != nullptr ? resumed->key : 0; k < 2; ++k) {
    const std::string key = k == 0 ? base : base + "|" + cred.hash;
    std::shared_ptr<flight> f;
    bool leader = false;
    if (resumed != nullptr && k == resumed->key) {
      f = resumed->f;  // ended: its result is read below
    } else {
      std::lock_guard lk(flights_mu_);
      auto [it, inserted] = flights_.try_emplace(key);
      if (inserted) {
        it->second = std::make_shared<flight>();
        it->second->cred_hash = cred.hash;
        leader = true;
      }
      f = it->second;
    }
    if (leader) {
      fetched out;
      try {
        out = fetch_and_store(w, cred, owner);
      } catch (const std::exception& e) {  // (never expected: the waiters must not hang)
        out.status = 500;
        out.message = std::string("manifest fetch: ") + e.what();
      }
      {
        std::lock_guard lk(flights_mu_);
        flights_.erase(key);
      }
      std::vector<std::function<void()>> parked;
      {
        std::lock_guard lk(f->mu);
        f->out = out;
        f->done = true;
        parked.swap(f->parked);
      }
      f->cv.notify_all();
      for (auto& p : parked) p();
      return out;
    }
    std::unique_lock lk(f->mu);
    if (!f->done) {
      if (m_.flights_joined) m_.flights_joined->inc();
      if (park) {
        park(resume{f, k});
        return std::nullopt;
      }
      f->cv.wait(lk, [&] { return f->done; });
    }
    if (f->cred_hash == cred.hash || (f->out.status == 200 && f->out.is_public)) return f->out;
  }
  // Two waits for fetches acting for others (only when many credentials race): go alone.
  return fetch_and_store(w, cred, owner);
}

manifest_service::fetched manifest_service::fetch_and_store(const want& w, const credential& cred,
                                                            const std::string& owner) {
  const std::string repo_key = w.sel.up->cfg.name + "/" + w.sel.repo;
  fetched f = owner.empty() ? fetch_upstream(w.sel, w.ref, cred, w.accept)
                            : fetch_from_ring(w, cred, owner);
  if (f.status != 200) return f;
  if (!w.is_tag && f.dig.str() != w.ref) {
    if (m_.digest_mismatch) m_.digest_mismatch->inc();
    log::error("a manifest does not match its digest", log::kv("digest", w.ref),
               log::kv("got", f.dig.str()), log::kv("repo", repo_key));
    f.status = 502;
    f.message = "upstream sent a manifest hashing to " + f.dig.str() + ", not " + w.ref;
    f.body.clear();
    return f;
  }
  if (auto s = store_manifest(f.dig, f.body, f.media_type, f.is_public, repo_key); !s) {
    log::warn("could not cache manifest", log::kv("digest", f.dig.str()),
              log::kv("error", s.error().message));
  }
  if (w.is_tag) {
    const auto now = now_ms();
    (void)st_.put_tag(w.tag_key, tag_entry{f.dig, f.media_type, now - f.age_ms, f.is_public});
    sweep_tags(now);
  }
  return f;
}

manifest_service::fetched manifest_service::fetch_from_ring(const want& w, const credential& cred,
                                                            std::string member) {
  const std::string key = ring_key(w);
  for (std::size_t tries = ring_->members().size(); tries > 0; --tries) {
    if (m_.ring_forwarded) m_.ring_forwarded->inc();
    // Anonymously first: the owner shares a public manifest; the client's credential goes only
    // where the owner needs it.
    auto f = ask_member(w, cred, member, false);
    if (f && (f->status == 401 || f->status == 403 || f->status == 404) && !cred.anonymous())
      f = ask_member(w, cred, member, true);
    if (f) return std::move(*f);
    ring_->mark_down(member, f.error().message);
    std::string next = ring_->owner(key);
    if (next == member) next = ring_->self();
    log::warn("ring owner of a manifest did not answer; asking the next member",
              log::kv("manifest", w.sel.repo + ":" + w.ref), log::kv("owner", member),
              log::kv("next", next == ring_->self() ? "upstream" : next),
              log::kv("error", f.error().message));
    if (next == ring_->self()) break;
    member = std::move(next);
  }
  return fetch_upstream(w.sel, w.ref, cred, w.accept);
}

result<manifest_service::fetched> manifest_service::ask_member(const want& w,
                                                               const credential& cred,
                                                               const std::string& member,
                                                               bool with_credential) {
  auto rq = ring_->request(member, "/v2/" + w.sel.repo + "/manifests/" + w.ref +
                                       "?ns=" + url_escape(w.sel.up->cfg.name));
  rq.timeouts.total = std::chrono::minutes(2);
  if (!w.accept.empty()) rq.headers.emplace_back("Accept", w.accept);
  if (with_credential) rq.headers.emplace_back("Authorization", cred.header);
  auto r =
      http::fetch(ring_->client(), std::move(rq), static_cast<std::size_t>(cfg_.max_size.bytes()));
  if (!r) return fail(r.error());
  if (r->status == 503 && r->header(ring::from_header))
    return fail(errc::unavailable, member + " is shutting down");
  fetched out;
  out.status = static_cast<unsigned>(r->status);
  if (r->status != 200) {
    out.retry_after = std::string(r->header("Retry-After").value_or(""));
    auto why = origin::error_message_of(r->body);
    out.message = why.empty() ? "ring member " + member + " answered HTTP " +
                                    std::to_string(r->status) + " for " + w.sel.repo + ":" + w.ref
                              : why;
    // The owner's upstream is down: a stale row of this replica's own may still serve.
    out.transport_error = r->status >= 500;
    return out;
  }
  out.body = std::move(r->body);
  out.dig = sha256_of(out.body);
  auto dcd = r->header("Docker-Content-Digest");
  if (!dcd || *dcd != out.dig.str()) {
    return fail(errc::digest_mismatch, member + " sent a manifest hashing to " + out.dig.str() +
                                           " but announced " +
                                           std::string(dcd.value_or("no digest")).substr(0, 80));
  }
  out.media_type = strip_params(r->header("Content-Type").value_or(""));
  if (!oci::is_manifest_media_type(out.media_type)) {
    auto mt = oci::manifest_media_type_of(out.body);
    if (mt) out.media_type = *mt;
  }
  // An answer to an anonymous request is public by definition; otherwise the owner says so.
  out.is_public = !with_credential || r->header(origin::headers::visibility).value_or("") ==
                                          origin::headers::visibility_public;
  out.stale = r->header("Warning").value_or("").starts_with("110");
  auto age = r->header("Age").value_or("");
  if (!age.empty() && age.size() <= 9 && age.find_first_not_of("0123456789") == age.npos)
    out.age_ms = std::stoll(std::string(age)) * 1000;
  return out;
}

manifest_service::fetched manifest_service::fetch_upstream(const selection& sel,
                                                           const std::string& ref,
                                                           const credential& cred,
                                                           const std::string& accept) {
  fetched out;
  const std::string path = "/v2/" + sel.repo + "/manifests/" + ref;
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Accept", accept.empty() ? std::string(oci::media::accept_all) : accept}};
  const auto max = static_cast<std::size_t>(cfg_.max_size.bytes());
  if (m_.upstream_requests) m_.upstream_requests->inc();
  auto r = uc_.call(*sel.up, sel.repo, nullptr, "GET", path, headers, max);
  out.is_public = true;
  if (r && (r->status == 401 || r->status == 403 || r->status == 404) && !cred.anonymous()) {
    if (m_.upstream_requests) m_.upstream_requests->inc();
    r = uc_.call(*sel.up, sel.repo, &cred, "GET", path, headers, max);
    out.is_public = false;
  }
  if (!r) {
    // A token realm refusing the client's credentials is an answer, not an outage: no stale
    // tag for it.
    out.status = gateway_status(r.error());
    out.transport_error = out.status != 401 && out.status != 429;
    if (out.status == 429) out.retry_after = "1";
    out.message = "upstream " + sel.up->cfg.name + ": " + r.error().message;
    return out;
  }
  out.status = static_cast<unsigned>(r->status);
  if (r->status != 200) {
    out.retry_after = std::string(r->header("Retry-After").value_or(""));
    out.message = "upstream " + sel.up->cfg.name + " answered HTTP " + std::to_string(r->status) +
                  " for " + sel.repo + ":" + ref;
    if (auto why = uc_.realm_refused(*sel.up); r->status == 401 && !why.empty())
      out.message += " (" + why + ")";
    // A 5xx from upstream counts as the upstream being down (stale answers may be served).
    out.transport_error = r->status >= 500;
    return out;
  }
  out.body = std::move(r->body);
  out.dig = sha256_of(out.body);
  if (auto dcd = r->header("Docker-Content-Digest"); dcd && *dcd != out.dig.str()) {
    if (m_.digest_mismatch) m_.digest_mismatch->inc();
    out.status = 502;
    out.message = "upstream sent a manifest hashing to " + out.dig.str() + " but announced " +
                  std::string(*dcd);
    return out;
  }
  out.media_type = strip_params(r->header("Content-Type").value_or(""));
  if (!oci::is_manifest_media_type(out.media_type)) {
    auto mt = oci::manifest_media_type_of(out.body);
    if (mt) out.media_type = *mt;
  }
  return out;
}

status manifest_service::store_manifest(const digest& d, const std::string& body,
                                        const std::string& mt, bool is_public,
                                        const std::string& repo_key) {
  if (auto s = st_.put_media_type(d, mt); !s) return s;
  if (auto s = st_.add_visibility(d, is_public, is_public ? std::string() : repo_key); !s) return s;
  auto t = store_.begin_write(d, body.size(), cache::object_kind::manifest);
  if (!t) return fail(t.error());
  if (t->role != cache::write_role::writer) return {};  // present, or being written by someone else
  if (auto s = t->writer->write(body); !s) return s;
  auto c = t->writer->commit();
  if (!c) return fail(c.error());
  return {};
}

http::response manifest_service::from_store(const digest& d, const std::string& media_type_hint,
                                            bool head, bool stale) {
  auto rd = store_.open_read(d);
  if (!rd)
    return manifest_error(rd.error().is(errc::not_found) ? 404 : 500,
                          "manifest " + d.str() + ": " + rd.error().message, {});
  auto body = rd->read_all();
  if (!body) return manifest_error(500, "manifest " + d.str() + ": " + body.error().message, {});
  std::string mt = media_type_hint;
  if (mt.empty()) mt = st_.get_media_type(d).value_or("");
  if (mt.empty()) mt = oci::manifest_media_type_of(*body).value_or("application/octet-stream");
  http::response r;
  r.status = 200;
  r.headers.set("Content-Type", mt);
  r.headers.set("Docker-Content-Digest", d.str());
  r.headers.set(std::string(origin::headers::api_version),
                std::string(origin::headers::api_version_value));
  r.headers.set("ETag", "\"" + d.str() + "\"");
  if (stale) {
    r.headers.set("Warning", "110 shoal-registry-proxy \"Response is Stale\"");
    if (m_.stale_served) m_.stale_served->inc();
  }
  if (head)
    r.headers.set("Content-Length", std::to_string(body->size()));
  else
    r.body = std::move(*body);
  return r;
}

void manifest_service::sweep_tags(std::int64_t now) {
  // Now and then (worker thread): rows too old to be served even stale are deleted.
  constexpr std::int64_t every_ms = 10 * 60 * 1000;
  auto last = last_sweep_ms_.load();
  if (now - last < every_ms || !last_sweep_ms_.compare_exchange_strong(last, now)) return;
  auto to_ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  const auto keep_ms = std::max(to_ms(cfg_.tag_ttl.get()), to_ms(cfg_.stale_if_error.get()));
  auto n = st_.sweep_tags(now - keep_ms);
  if (!n)
    log::warn("could not sweep expired tag rows", log::kv("error", n.error().message));
  else if (*n)
    log::info("expired tag rows deleted", log::kv("rows", *n));
}

http::response manifest_service::memory_answer(fetched& f, bool head) {
  http::response r;
  r.status = 200;
  r.headers.set("Content-Type", f.media_type);
  r.headers.set("Docker-Content-Digest", f.dig.str());
  r.headers.set(std::string(origin::headers::api_version),
                std::string(origin::headers::api_version_value));
  r.headers.set("ETag", "\"" + f.dig.str() + "\"");
  if (head)
    r.headers.set("Content-Length", std::to_string(f.body.size()));
  else
    r.body = std::move(f.body);
  return r;
}

std::optional<http::response> manifest_service::respond(
    const selection& sel, const oci::manifest_ref& ref, const credential& cred,
    const std::string& accept, bool head, const std::string& ring_from, const park_fn& park,
    const resume* resumed) {
  const std::string repo_key = sel.up->cfg.name + "/" + sel.repo;
  const std::string acc = normalize_accept(accept);
  // To a ring member: whether the manifest is public (it may then serve it to anyone).
  auto tell_member = [&](http::response& r, bool is_public) {
    if (!ring_from.empty() && is_public && r.status == 200)
      r.headers.set(std::string(origin::headers::visibility),
                    std::string(origin::headers::visibility_public));
  };
  if (ref.is_digest()) {
    const digest& d = *ref.dig;
    if (store_.contains(d)) {
      auto v = access_.check(sel, d, "/v2/" + sel.repo + "/manifests/" + d.str(), cred);
      if (!v.allowed) return manifest_error(v.status, v.message, v.retry_after);
      auto r = from_store(d, {}, head, false);
      if (!ring_from.empty()) {
        auto vis = st_.get_visibility(d);
        tell_member(r, vis && vis->is_public);
      }
      return r;
    }
    auto obtained = obtain({sel, d.str(), false, acc, {}, ring_from}, cred, park, resumed);
    if (!obtained) return std::nullopt;  // parked
    auto& f = *obtained;
    if (f.status != 200) return manifest_error(f.status, f.message, f.retry_after);
    http::response r = from_store(d, f.media_type, head, false);
    // Not cacheable (disk full...): answer from memory anyway.
    if (r.status != 200) r = memory_answer(f, head);
    tell_member(r, f.is_public);
    return r;
  }

  // By tag.
  const std::string key = repo_key + ":" + *ref.tag + "|" + acc;
  auto entry = st_.get_tag(key);
  const auto now = now_ms();
  const auto ttl_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.tag_ttl.get()).count();
  // How old the row is, for a member that keeps it (the tag's TTL runs from upstream's answer).
  auto with_age = [&](http::response r, std::int64_t fetched_ms) {
    if (r.status == 200 && now > fetched_ms)
      r.headers.set("Age", std::to_string((now - fetched_ms) / 1000));
    return r;
  };
  if (entry && now - entry->fetched_ms < ttl_ms && store_.contains(entry->dig)) {
    if (!entry->is_public) {
      auto v = access_.check(sel, entry->dig, "/v2/" + sel.repo + "/manifests/" + entry->dig.str(),
                             cred);
      if (!v.allowed) return manifest_error(v.status, v.message, v.retry_after);
    }
    if (m_.tag_hits) m_.tag_hits->inc();
    auto r = with_age(from_store(entry->dig, entry->media_type, head, false), entry->fetched_ms);
    tell_member(r, entry->is_public);
    return r;
  }
  auto obtained = obtain({sel, *ref.tag, true, acc, key, ring_from}, cred, park, resumed);
  if (!obtained) return std::nullopt;  // parked
  auto& f = *obtained;
  if (f.status == 200) {
    const bool is_public = f.is_public, stale = f.stale;
    const auto age_ms = f.age_ms;
    auto r = memory_answer(f, head);
    if (stale) {
      r.headers.set("Warning", "110 shoal-registry-proxy \"Response is Stale\"");
      if (m_.stale_served) m_.stale_served->inc();
    }
    if (age_ms > 0) r.headers.set("Age", std::to_string(age_ms / 1000));
    tell_member(r, is_public);
    return r;
  }
  // Upstream down: an expired answer is better than none, within stale_if_error.
  const auto stale_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.stale_if_error.get()).count();
  if (f.transport_error && entry && now - entry->fetched_ms < stale_ms &&
      store_.contains(entry->dig)) {
    if (!entry->is_public) {
      auto v = access_.check(sel, entry->dig, "/v2/" + sel.repo + "/manifests/" + entry->dig.str(),
                             cred);
      // The check needs upstream too; without it private content stays closed.
      if (!v.allowed) return manifest_error(v.status, v.message, v.retry_after);
    }
    log::warn("serving a stale tag because upstream failed",
              log::kv("tag", repo_key + ":" + *ref.tag), log::kv("error", f.message));
    auto r = with_age(from_store(entry->dig, entry->media_type, head, true), entry->fetched_ms);
    tell_member(r, entry->is_public);
    return r;
  }
  return manifest_error(f.status, f.message, f.retry_after);
}

}  // namespace shoal::proxy

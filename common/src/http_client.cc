#include "common/http_client.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <mutex>

#include "common/log.h"
#include "common/tls.h"
#include "common/thread_name.h"
#include "common/utf8.h"
#include "http_client_impl.h"
#include "http_client_util.h"

namespace shoal::http {

bool ci_less::operator()(std::string_view a, std::string_view b) const noexcept {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(),
      [](unsigned char x, unsigned char y) { return std::tolower(x) < std::tolower(y); });
}

std::optional<std::string_view> response_head::header(std::string_view name) const {
  return first_header(headers, name);
}

std::optional<std::string_view> full_response::header(std::string_view name) const {
  return first_header(headers, name);
}

namespace {

// The loop wakes at least this often even with nothing due, as a safety net for timers.
constexpr milliseconds kMaxPollWait{1000};
// How often the loop re-checks a transfer whose stall timer is due but whose connection is
// still being set up (the connect timeout governs that phase).
constexpr milliseconds kConnectRecheck{50};

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

client::impl::impl(client_options opts) : opts_(std::move(opts)) {
  global_init_once();
  if (opts_.max_connections_per_host == 0) opts_.max_connections_per_host = 1;
  multi_ = curl_multi_init();
  if (multi_ != nullptr) {
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, opts_.max_idle_connections);
  } else {
    log::error("http client: curl_multi_init failed; every request will fail");
  }
  thread_ = std::thread([this] {
    name_this_thread("http-client");
    run();
  });
}

client::impl::~impl() {
  stop();
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
}

request_id client::impl::submit(client_request req, callbacks cb) {
  auto t = std::make_unique<transfer>();
  const request_id id = next_id_.fetch_add(1);
  t->id = id;
  t->req = std::move(req);
  t->cb = std::move(cb);
  t->owner = this;
  t->submitted = clock::now();
  {
    std::lock_guard lock(mu_);
    if (!stopping_ && multi_ != nullptr) {
      inbox_.push_back(std::move(t));
    }
  }
  if (t) {
    // The client is stopped: complete here, on the caller's thread, so the contract holds.
    if (t->cb.on_complete) {
      try {
        t->cb.on_complete(
            fail(errc::cancelled,
                 t->req.method + " " + detail::redact_url(t->req.url) + ": http client stopped"));
      } catch (...) {
        log::error("http client: on_complete threw",
                   log::kv("error", describe_exception(std::current_exception())));
      }
    }
    return id;
  }
  curl_multi_wakeup(multi_);
  return id;
}

void client::impl::cancel(request_id id) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    cancels_.push_back(id);
  }
  curl_multi_wakeup(multi_);
}

void client::impl::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  if (multi_ != nullptr) curl_multi_wakeup(multi_);
  // From a callback the loop cannot be joined; it exits after this iteration.
  if (on_thread()) return;
  std::lock_guard lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void client::impl::run() {
  thread_id_.store(std::this_thread::get_id());
  if (multi_ == nullptr) {
    // Nothing can run; everything submitted was already refused in submit().
    std::lock_guard lock(mu_);
    stopping_ = true;
    return;
  }
  for (;;) {
    std::vector<std::unique_ptr<transfer>> incoming;
    std::vector<request_id> cancels;
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      incoming.swap(inbox_);
      cancels.swap(cancels_);
      stopping = stopping_;
    }
    for (auto& t : incoming) accept(std::move(t));
    for (request_id id : cancels) {
      abort_now(id, error{errc::cancelled, "cancelled"}, false);
    }
    if (stopping) break;

    auto now = clock::now();
    std::vector<request_id> due;
    for (auto& [id, t] : transfers_) {
      if (t->state == transfer_state::backoff && t->retry_at <= now) due.push_back(id);
    }
    for (request_id id : due) {
      if (auto it = transfers_.find(id); it != transfers_.end()) begin_attempt(*it->second);
    }

    int running = 0;
    curl_multi_perform(multi_, &running);
    drain_messages();
    now = clock::now();
    check_timers(now);
    milliseconds wait = std::clamp(next_wakeup(clock::now()), milliseconds(0), kMaxPollWait);
    curl_multi_poll(multi_, nullptr, 0, static_cast<int>(wait.count()), nullptr);
  }

  // Stopping: every request still here completes with cancelled.
  shutting_down_ = true;
  std::vector<request_id> ids;
  ids.reserve(transfers_.size());
  for (auto& [id, t] : transfers_) ids.push_back(id);
  for (request_id id : ids) abort_now(id, error{errc::cancelled, "http client stopped"}, false);
  hosts_.clear();
}

void client::impl::accept(std::unique_ptr<transfer> tp) {
  transfer& t = *tp;
  transfers_.emplace(t.id, std::move(tp));
  if (t.req.timeouts.total.count() > 0) t.deadline = t.submitted + t.req.timeouts.total;

  auto o = detail::parse_origin(t.req.url);
  if (!o) return fail_transfer(t, o.error());
  t.first_origin = *o;
  if (t.req.policy) {
    t.policy = &*t.req.policy;
    t.own_policy = true;
  } else if (opts_.policy) {
    t.policy = &*opts_.policy;
  }
  if (auto s = check_hop(t, *o); !s) return fail_transfer(t, s.error());
  if (t.req.method.empty() ||
      !std::all_of(t.req.method.begin(), t.req.method.end(),
                   [](unsigned char c) { return std::isalpha(c) || c == '-' || c == '_'; })) {
    return fail_transfer(t, error{errc::invalid_argument, "invalid method"});
  }
  for (const auto& [name, value] : t.req.headers) {
    if (name.empty() || name.find(':') != std::string::npos || !valid_header_text(name) ||
        name.find(' ') != std::string::npos || !valid_header_text(value)) {
      return fail_transfer(t,
                           error{errc::invalid_argument, "invalid request header '" + name + "'"});
    }
  }
  begin_attempt(t);
}

void client::impl::begin_attempt(transfer& t) {
  t.attempts++;
  t.url = t.req.url;
  t.method = t.req.method;
  t.send_body = true;
  t.creds_dropped = false;
  t.other_origin = false;
  t.hop_origin = t.first_origin;
  t.hop_redirects = 0;
  t.resuming = t.delivered > 0;
  if (t.resuming) t.resumes++;
  start_hop(t);
}

void client::impl::start_hop(transfer& t) {
  auto& slots = hosts_[t.hop_origin.key()];
  if (!shutting_down_ && slots.active < opts_.max_connections_per_host) {
    slots.active++;
    launch(t);
  } else {
    t.state = transfer_state::waiting_slot;
    slots.waiting.push_back(t.id);
  }
}

void client::impl::launch(transfer& t) {
  t.state = transfer_state::active;
  t.status = 0;
  t.reason.clear();
  t.headers.clear();
  t.last_header.reset();
  t.head_done = false;
  t.header_bytes = 0;
  t.disp = disposition::undecided;
  t.forced.reset();
  t.forced_retryable = false;
  t.discarded = 0;
  t.attempt_delivered = 0;
  t.last_upload = 0;
  t.location.clear();
  t.retry_after.reset();
  t.refused.reset();
  t.errbuf[0] = '\0';
  t.os_errno = 0;
  t.attempt_start = clock::now();
  t.last_progress = t.attempt_start;

  status s = setup_easy(t);
  if (s && curl_multi_add_handle(multi_, t.easy) != CURLM_OK) {
    s = fail(errc::internal, "curl_multi_add_handle failed");
  }
  if (!s) {
    if (t.easy != nullptr) curl_easy_cleanup(t.easy);
    t.easy = nullptr;
    if (t.slist != nullptr) curl_slist_free_all(t.slist);
    t.slist = nullptr;
    // Report through the normal path on the next timer check, never re-entrantly from here:
    // launch() runs while other transfers' slots are being handed over.
    t.forced = s.error();
    t.forced_retryable = false;
  }
}

void client::impl::detach(transfer& t) {
  if (t.state == transfer_state::active) {
    if (t.easy != nullptr) {
      curl_multi_remove_handle(multi_, t.easy);
      curl_easy_cleanup(t.easy);
      t.easy = nullptr;
    }
    if (t.slist != nullptr) {
      curl_slist_free_all(t.slist);
      t.slist = nullptr;
    }
    t.state = transfer_state::idle;
    release_slot(t.hop_origin.key());
  } else if (t.state == transfer_state::waiting_slot) {
    auto it = hosts_.find(t.hop_origin.key());
    if (it != hosts_.end()) {
      auto& w = it->second.waiting;
      w.erase(std::remove(w.begin(), w.end(), t.id), w.end());
    }
    t.state = transfer_state::idle;
  } else if (t.state == transfer_state::backoff) {
    t.state = transfer_state::idle;
  }
}

void client::impl::release_slot(const std::string& key) {
  auto it = hosts_.find(key);
  if (it == hosts_.end()) return;
  host_slots& slots = it->second;
  if (slots.active > 0) slots.active--;
  while (!shutting_down_ && slots.active < opts_.max_connections_per_host &&
         !slots.waiting.empty()) {
    request_id next = slots.waiting.front();
    slots.waiting.pop_front();
    auto tit = transfers_.find(next);
    if (tit == transfers_.end() || tit->second->state != transfer_state::waiting_slot) continue;
    slots.active++;
    launch(*tit->second);
  }
  if (slots.active == 0 && slots.waiting.empty()) hosts_.erase(it);
}

void client::impl::drain_messages() {
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    transfer* t = nullptr;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
    CURLcode code = m->data.result;
    if (t == nullptr) continue;
    curl_easy_getinfo(m->easy_handle, CURLINFO_OS_ERRNO, &t->os_errno);
    // `m` is invalid once the handle is removed; everything needed was copied above.
    detach(*t);
    after_attempt(*t, code);
  }
}

void client::impl::abort_now(request_id id, error e, bool retryable) {
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return;
  transfer& t = *it->second;
  detach(t);
  t.forced = std::move(e);
  t.forced_retryable = retryable;
  after_attempt(t, CURLE_OK);
}

void client::impl::check_timers(clock::time_point now) {
  struct action {
    request_id id;
    error e;
    bool retryable;
  };
  std::vector<action> actions;
  for (auto& [id, tp] : transfers_) {
    transfer& t = *tp;
    if (t.state == transfer_state::active && t.forced && t.easy == nullptr) {
      // A launch that failed: report it now.
      actions.push_back({id, *t.forced, t.forced_retryable});
      continue;
    }
    if (t.deadline && now >= *t.deadline) {
      std::string msg =
          "total timeout of " + detail::format_duration(t.req.timeouts.total) + " exceeded";
      if (t.last_cause) msg += " (last failure: " + t.last_cause->message + ")";
      actions.push_back({id, error{errc::timeout, std::move(msg)}, false});
      continue;
    }
    const milliseconds stall = t.req.timeouts.stall;
    if (t.state != transfer_state::active || stall.count() <= 0 || t.easy == nullptr) continue;
    clock::time_point base = std::max(t.last_progress, t.attempt_start);
    if (now - base < stall) continue;
    // The stall clock starts once the request is on its way; before that the connect timeout
    // governs. curl reports the pre-transfer time (connection ready, request about to be sent)
    // as 0 until then, for new and reused connections alike.
    curl_off_t ready_us = 0;
    curl_easy_getinfo(t.easy, CURLINFO_PRETRANSFER_TIME_T, &ready_us);
    if (ready_us == 0) {
      if (now - t.attempt_start < t.req.timeouts.connect + stall) continue;
    } else {
      auto ready = t.attempt_start + std::chrono::microseconds(ready_us);
      if (now - std::max(base, ready) < stall) continue;
    }
    actions.push_back(
        {id, error{errc::timeout, "stalled: no bytes for " + detail::format_duration(stall)},
         true});
  }
  for (auto& a : actions) abort_now(a.id, std::move(a.e), a.retryable);
}

milliseconds client::impl::next_wakeup(clock::time_point now) {
  clock::time_point next = now + kMaxPollWait;
  for (auto& [id, tp] : transfers_) {
    const transfer& t = *tp;
    if (t.deadline) next = std::min(next, *t.deadline);
    if (t.state == transfer_state::backoff) next = std::min(next, t.retry_at);
    if (t.state == transfer_state::active) {
      if (t.forced && t.easy == nullptr) return milliseconds(0);
      if (t.req.timeouts.stall.count() > 0) {
        auto due = std::max(t.last_progress, t.attempt_start) + t.req.timeouts.stall;
        // Already due but waiting for the connection: re-check soon rather than spin.
        next = std::min(next, due <= now ? now + kConnectRecheck : due);
      }
    }
  }
  if (next <= now) return milliseconds(0);
  // Round up so the loop does not wake a hair early and spin once more.
  return duration_cast<milliseconds>(next - now) + milliseconds(1);
}

milliseconds client::impl::backoff(int failures) {
  const auto base = std::max<std::int64_t>(opts_.retry_base.count(), 1);
  const auto cap = std::max<std::int64_t>(opts_.retry_cap.count(), base);
  std::int64_t d = base;
  for (int i = 0; i < failures && d < cap; ++i) d *= 2;
  d = std::min(d, cap);
  std::uniform_int_distribution<std::int64_t> jitter(d / 2, d);
  return milliseconds(jitter(rng_));
}

bool client::impl::can_retry_status(const transfer& t, milliseconds delay) const {
  if (!is_idempotent(t.req.method) || t.failures >= t.req.max_retries) return false;
  if (t.resuming && !(t.req.resume && t.resumable)) return false;
  if (t.deadline && clock::now() + delay >= *t.deadline) return false;
  return true;
}

void client::impl::after_attempt(transfer& t, CURLcode code) {
  // The easy handle is gone (detach); CURLINFO is no longer available, so errors that need it
  // are computed here from what was kept.
  if (t.attempt_delivered > 0) t.failures = 0;
  std::optional<error> err = t.forced;
  bool retryable = t.forced_retryable;
  if (!err) {
    if (t.disp == disposition::redirect) return follow_redirect(t);
    if (t.disp == disposition::retry_status) {
      t.last_cause = error{errc::upstream_error, "status " + std::to_string(t.status)};
      t.failures++;
      milliseconds delay = t.retry_after ? *t.retry_after : backoff(t.failures - 1);
      return schedule_retry(t, delay);
    }
    if (code == CURLE_OK) {
      if (t.disp == disposition::deliver || t.disp == disposition::continue_resume) {
        return succeed(t);
      }
      err = error{errc::protocol_error, "no response"};
      retryable = true;
    } else if (t.refused) {
      err = *t.refused;  // the connect policy refused every address: final
      retryable = false;
    } else {
      err = curl_failure(t, code);
      retryable = detail::is_retryable(code);
    }
  }
  if (retryable && !t.caller_aborted && is_idempotent(t.req.method) &&
      t.failures < t.req.max_retries) {
    const bool fresh = t.delivered == 0;
    const bool can_resume = !fresh && t.req.resume && t.resumable && t.req.method == "GET";
    if (fresh || can_resume) {
      t.last_cause = *err;
      t.failures++;
      if (can_resume) {
        log::info("http: resuming broken transfer", log::kv("url", detail::redact_url(t.url)),
                  log::kv("offset", t.entity_first + t.delivered), log::kv("cause", err->message));
      }
      return schedule_retry(t, backoff(t.failures - 1));
    }
  }
  fail_transfer(t, std::move(*err));
}

void client::impl::follow_redirect(transfer& t) {
  auto next = detail::resolve_location(t.url, t.location);
  if (!next) return fail_transfer(t, next.error());
  auto o = detail::parse_origin(*next);
  if (!o) return fail_transfer(t, o.error().wrap("redirect"));
  if (auto s = check_hop(t, *o); !s) return fail_transfer(t, s.error().wrap("redirect"));
  if (!(*o == t.hop_origin)) t.creds_dropped = true;
  t.other_origin = !(*o == t.first_origin);
  const int s = t.status;
  if ((s == 303 && t.method != "HEAD") || ((s == 301 || s == 302) && t.method == "POST")) {
    t.method = "GET";
    t.send_body = false;
  }
  t.url = std::move(*next);
  t.hop_origin = std::move(*o);
  t.hop_redirects++;
  t.total_redirects++;
  start_hop(t);
}

void client::impl::schedule_retry(transfer& t, milliseconds delay) {
  auto now = clock::now();
  if (t.deadline && now + delay >= *t.deadline) {
    std::string msg = "total timeout of " + detail::format_duration(t.req.timeouts.total) +
                      " leaves no time to retry";
    if (t.last_cause) msg += " (last failure: " + t.last_cause->message + ")";
    return fail_transfer(t, error{errc::timeout, std::move(msg)});
  }
  log::debug("http: retrying", log::kv("url", detail::redact_url(t.req.url)),
             log::kv("attempt", t.attempts + 1), log::kv("delay_ms", delay.count()),
             log::kv("cause", t.last_cause ? t.last_cause->message : std::string()));
  t.state = transfer_state::backoff;
  t.retry_at = now + delay;
}

void client::impl::succeed(transfer& t) {
  completion c;
  c.status = t.final_status;
  c.bytes = t.delivered;
  c.attempts = t.attempts;
  c.redirects = t.total_redirects;
  c.resumes = t.resumes;
  c.url = t.final_url;
  c.elapsed = duration_cast<milliseconds>(clock::now() - t.submitted);
  finish(t, std::move(c));
}

void client::impl::fail_transfer(transfer& t, error e) {
  std::string msg =
      t.method + " " + detail::redact_url(t.url.empty() ? t.req.url : t.url) + ": " + e.message;
  if (t.attempts > 1) msg += " (after " + std::to_string(t.attempts) + " attempts)";
  // Parts of the message come from the network (Location, curl's text about it).
  e.message = utf8_safe(msg);
  finish(t, std::unexpected(std::move(e)));
}

void client::impl::finish(transfer& t, result<completion> r) {
  // Take the transfer out first so that a callback cancelling or submitting finds a consistent
  // table, and so that it is destroyed even if on_complete throws.
  detach(t);
  auto node = transfers_.extract(t.id);
  if (node.empty()) return;
  std::unique_ptr<transfer> owned = std::move(node.mapped());
  if (owned->cb.on_complete) {
    try {
      owned->cb.on_complete(std::move(r));
    } catch (...) {
      log::error("http client: on_complete threw",
                 log::kv("error", describe_exception(std::current_exception())));
    }
  }
}

// client

client_options client_options_with_tls(client_options o, const tls::tls_config& t) {
  if (!t.enabled) return o;
  o.ca_file = t.ca_file;
  o.cert_file = t.cert_file;
  o.key_file = t.key_file;
  return o;
}

client::client(client_options opts) : impl_(std::make_unique<impl>(std::move(opts))) {}
client::~client() { impl_->stop(); }
request_id client::submit(client_request req, callbacks cb) {
  return impl_->submit(std::move(req), std::move(cb));
}
void client::cancel(request_id id) { impl_->cancel(id); }
void client::stop() { impl_->stop(); }
bool client::on_client_thread() const noexcept { return impl_->on_thread(); }

result<endpoint> parse_endpoint(const std::string& url) {
  auto o = detail::parse_origin(url);
  if (!o) return fail(o.error());
  return endpoint{o->scheme, o->host, o->port};
}

// fetch

result<full_response> fetch(client& c, client_request req, std::size_t max_body) {
  if (c.on_client_thread()) {
    return fail(errc::internal, "http::fetch called on the client thread (would deadlock)");
  }
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool too_large = false;
    full_response resp;
    std::optional<result<full_response>> out;
  };
  auto st = std::make_shared<state>();
  callbacks cb;
  // The callbacks run on the client thread while this thread only waits, so `resp` is written
  // by one thread at a time; the mutex publishes it at the end.
  cb.on_response = [st](const response_head& h) {
    st->resp.status = h.status;
    st->resp.reason = h.reason;
    st->resp.headers = h.headers;
    st->resp.body.clear();
    return true;
  };
  cb.on_data = [st, max_body](std::string_view chunk) {
    if (st->resp.body.size() + chunk.size() > max_body) {
      st->too_large = true;
      return false;
    }
    st->resp.body.append(chunk);
    return true;
  };
  cb.on_complete = [st, max_body](result<completion> r) {
    std::lock_guard lock(st->mu);
    if (r) {
      st->resp.info = std::move(*r);
      st->out = std::move(st->resp);
    } else if (st->too_large) {
      st->out = fail(errc::too_large,
                     r.error().message + ": body exceeds " + std::to_string(max_body) + " bytes");
    } else {
      st->out = std::unexpected(std::move(r.error()));
    }
    st->done = true;
    st->cv.notify_all();
  };
  c.submit(std::move(req), std::move(cb));
  std::unique_lock lock(st->mu);
  st->cv.wait(lock, [&] { return st->done; });
  return std::move(*st->out);
}

}  // namespace shoal::http

#include "common/http_client.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include <cstring>

#include "common/log.h"
#include "http_client_util.h"

namespace shoal::http {

using clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

bool ci_less::operator()(std::string_view a, std::string_view b) const noexcept {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(), [](unsigned char x, unsigned char y) {
        return std::tolower(x) < std::tolower(y);
      });
}

namespace {

std::optional<std::string_view> first_header(const header_map& h, std::string_view name) {
  auto it = h.find(name);
  if (it == h.end()) return std::nullopt;
  return std::string_view(it->second);
}

}  // namespace

std::optional<std::string_view> response_head::header(std::string_view name) const {
  return first_header(headers, name);
}

std::optional<std::string_view> full_response::header(std::string_view name) const {
  return first_header(headers, name);
}

namespace {

// Bodies of responses the client does not hand over (redirects, statuses it retries) are read
// and dropped so the connection can be reused, up to this much; past it the connection is
// closed instead.
constexpr std::uint64_t kMaxDiscard = 1 << 20;
// The loop wakes at least this often even with nothing due, as a safety net for timers.
constexpr milliseconds kMaxPollWait{1000};
// How often the loop re-checks a transfer whose stall timer is due but whose connection is
// still being set up (the connect timeout governs that phase).
constexpr milliseconds kConnectRecheck{50};
constexpr long kBufferSize = 128 * 1024;

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool is_idempotent(std::string_view method) { return method == "GET" || method == "HEAD"; }
bool is_redirect(int s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }
bool is_retryable_status(int s) { return s == 429 || s == 502 || s == 503 || s == 504; }

bool valid_header_text(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

std::string describe_exception(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

// What the client does with the response of the current attempt, decided when its head is
// complete.
enum class disposition {
  undecided,        // head not complete yet
  deliver,          // hand head and body to the caller
  continue_resume,  // a 206 continuing a broken body: body to the caller, head not
  redirect,         // follow Location; drop the body
  retry_status,     // 429/502/503/504 that will be retried; drop the body
};

enum class transfer_state { waiting_slot, active, backoff };

// One submitted request through all its attempts and redirect hops. Lives on the client thread
// in impl::transfers_ from the moment the loop takes it from the inbox until on_complete.
struct transfer {
  request_id id = 0;
  request req;
  callbacks cb;
  void* owner = nullptr;  // the client::impl running it (private type, hence void*)

  // The current hop of the current attempt.
  std::string url;
  std::string method;
  bool send_body = true;
  bool creds_dropped = false;
  bool other_origin = false;  // the hop's origin differs from the request's
  detail::origin hop_origin;
  detail::origin first_origin;
  int hop_redirects = 0;

  // Across attempts.
  transfer_state state = transfer_state::waiting_slot;
  int attempts = 0;
  int failures = 0;  // consecutive failed attempts without body progress
  int total_redirects = 0;
  int resumes = 0;
  std::uint64_t delivered = 0;
  bool resumable = false;
  std::uint64_t entity_first = 0;
  std::uint64_t entity_end = 0;  // exclusive end of the delivered range
  std::optional<std::uint64_t> entity_total;
  std::string validator;  // strong ETag or Last-Modified of the first delivered response
  bool resuming = false;  // the current attempt continues a broken body
  int final_status = 0;
  std::string final_url;
  clock::time_point submitted;
  std::optional<clock::time_point> deadline;
  clock::time_point attempt_start;
  clock::time_point last_progress;
  clock::time_point retry_at;
  std::optional<error> last_cause;

  // The current attempt.
  CURL* easy = nullptr;
  curl_slist* slist = nullptr;
  char errbuf[CURL_ERROR_SIZE] = {};
  int status = 0;
  std::string reason;
  header_map headers;
  bool head_done = false;
  std::size_t header_bytes = 0;
  disposition disp = disposition::undecided;
  std::optional<error> forced;    // a failure the client decided (stall, limit, abort, policy)
  bool forced_retryable = false;  // whether `forced` may be retried
  bool caller_aborted = false;
  std::uint64_t discarded = 0;
  std::uint64_t attempt_delivered = 0;
  curl_off_t last_upload = 0;
  long os_errno = 0;  // kept from the easy handle before it is released
  std::string location;
  std::optional<milliseconds> retry_after;
};

// The multi loop. Everything except the inbox, the cancel list and the stop flag belongs to the
// client thread.
class client::impl {
 public:
  explicit impl(client_options opts);
  ~impl();

  request_id submit(request req, callbacks cb);
  void cancel(request_id id);
  void stop();
  bool on_thread() const noexcept { return std::this_thread::get_id() == thread_id_.load(); }

 private:
  struct host_slots {
    std::size_t active = 0;
    std::deque<request_id> waiting;
  };

  void run();
  void accept(std::unique_ptr<transfer> t);
  void begin_attempt(transfer& t);
  void start_hop(transfer& t);
  void launch(transfer& t);
  status setup_easy(transfer& t);
  void detach(transfer& t);
  void release_slot(const std::string& key);
  void drain_messages();
  void check_timers(clock::time_point now);
  milliseconds next_wakeup(clock::time_point now);
  void after_attempt(transfer& t, CURLcode code);
  void follow_redirect(transfer& t);
  void schedule_retry(transfer& t, milliseconds delay);
  milliseconds backoff(int failures);
  bool can_retry_status(const transfer& t, milliseconds delay) const;
  error curl_failure(const transfer& t, CURLcode code);
  void succeed(transfer& t);
  void fail_transfer(transfer& t, error e);
  void finish(transfer& t, result<completion> r);
  void abort_now(request_id id, error e, bool retryable);

  // curl callbacks, on the client thread inside curl_multi_perform.
  static size_t header_cb(char* data, size_t size, size_t n, void* user);
  static size_t write_cb(char* data, size_t size, size_t n, void* user);
  static int xfer_cb(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t ulnow);
  bool on_head_done(transfer& t);
  static impl& self(transfer& t) { return *static_cast<impl*>(t.owner); }

  client_options opts_;
  CURLM* multi_ = nullptr;
  std::atomic<request_id> next_id_{1};
  std::atomic<std::thread::id> thread_id_{};

  std::mutex mu_;
  bool stopping_ = false;                           // guarded by mu_
  std::vector<std::unique_ptr<transfer>> inbox_;    // guarded by mu_
  std::vector<request_id> cancels_;                 // guarded by mu_

  std::mutex join_mu_;
  std::thread thread_;

  // Client thread only.
  std::unordered_map<request_id, std::unique_ptr<transfer>> transfers_;
  std::unordered_map<std::string, host_slots> hosts_;
  bool shutting_down_ = false;  // no new launches while cancelling everything
  std::mt19937_64 rng_{std::random_device{}()};
};

client::impl::impl(client_options opts) : opts_(std::move(opts)) {
  global_init_once();
  if (opts_.max_connections_per_host == 0) opts_.max_connections_per_host = 1;
  multi_ = curl_multi_init();
  if (multi_ != nullptr) {
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, opts_.max_idle_connections);
  } else {
    log::error("http client: curl_multi_init failed; every request will fail");
  }
  thread_ = std::thread([this] { run(); });
}

client::impl::~impl() {
  stop();
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
}

request_id client::impl::submit(request req, callbacks cb) {
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
        t->cb.on_complete(fail(errc::cancelled, t->req.method + " " +
                                                    detail::redact_url(t->req.url) +
                                                    ": http client stopped"));
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

status client::impl::setup_easy(transfer& t) {
  t.easy = curl_easy_init();
  if (t.easy == nullptr) return fail(errc::internal, "curl_easy_init failed");
  CURL* e = t.easy;
  curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
  curl_easy_setopt(e, CURLOPT_URL, t.url.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.errbuf);
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, kBufferSize);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
  if (t.req.timeouts.connect.count() > 0) {
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(t.req.timeouts.connect.count()));
  }
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &impl::header_cb);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &impl::write_cb);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, &impl::xfer_cb);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  if (!opts_.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, opts_.ca_file.c_str());
  if (opts_.insecure) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }

  const bool has_body = t.send_body && (!t.req.body.empty() || t.method == "POST" ||
                                        t.method == "PUT" || t.method == "PATCH");
  if (t.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (t.method == "GET" && !has_body) {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else {
    if (t.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, t.method.c_str());
    if (has_body) {
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(t.req.body.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, t.req.body.data());
    }
  }

  // Headers: the caller's, minus credentials after an origin change, minus a Range the client
  // replaces when resuming.
  bool has_ua = false, has_ctype = false, has_expect = false;
  auto add = [&t](const std::string& line) {
    curl_slist* n = curl_slist_append(t.slist, line.c_str());
    if (n == nullptr) return false;
    t.slist = n;
    return true;
  };
  bool ok = true;
  for (const auto& [name, value] : t.req.headers) {
    if (t.creds_dropped) {
      if (detail::iequals(name, "Authorization")) continue;
      bool cred = std::any_of(t.req.redirects.credential_headers.begin(),
                              t.req.redirects.credential_headers.end(),
                              [&](const std::string& c) { return detail::iequals(c, name); });
      if (cred) continue;
    }
    if (t.resuming && (detail::iequals(name, "Range") || detail::iequals(name, "If-Range"))) {
      continue;
    }
    if (!t.send_body && (detail::iequals(name, "Content-Type") ||
                         detail::iequals(name, "Content-Length"))) {
      continue;
    }
    has_ua |= detail::iequals(name, "User-Agent");
    has_ctype |= detail::iequals(name, "Content-Type");
    has_expect |= detail::iequals(name, "Expect");
    // curl sends "Name;" as an empty header, while "Name:" would remove it.
    ok = ok && add(value.empty() ? name + ";" : name + ": " + value);
  }
  if (t.resuming) {
    // The rest of the delivered range: open-ended when it runs to the end of the entity.
    std::string range = "Range: bytes=" + std::to_string(t.entity_first + t.delivered) + "-";
    if (!t.entity_total || *t.entity_total != t.entity_end) {
      range += std::to_string(t.entity_end - 1);
    }
    ok = ok && add(range);
    // If-Range makes a server whose entity changed answer 200, which fails the resume instead
    // of splicing two different entities together.
    if (!t.validator.empty()) ok = ok && add("If-Range: " + t.validator);
  }
  if (!has_ua && !opts_.user_agent.empty()) ok = ok && add("User-Agent: " + opts_.user_agent);
  // No 100-continue round trip, and no form content type invented by curl for raw bodies.
  if (!has_expect) ok = ok && add("Expect:");
  if (has_body && !has_ctype) ok = ok && add("Content-Type:");
  if (!ok) return fail(errc::internal, "curl_slist_append failed");
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.slist);

  if (t.req.customize && (!t.other_origin || t.req.redirects.customize_on_other_origin)) {
    try {
      t.req.customize(e);
    } catch (...) {
      return fail(errc::internal,
                  "customize hook threw: " + describe_exception(std::current_exception()));
    }
  }
  return {};
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
    t.state = transfer_state::backoff;  // neutral: no slot, no handle, until rescheduled
    t.retry_at = clock::time_point::max();
    release_slot(t.hop_origin.key());
  } else if (t.state == transfer_state::waiting_slot) {
    auto it = hosts_.find(t.hop_origin.key());
    if (it != hosts_.end()) {
      auto& w = it->second.waiting;
      w.erase(std::remove(w.begin(), w.end(), t.id), w.end());
    }
    t.state = transfer_state::backoff;
    t.retry_at = clock::time_point::max();
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
      std::string msg = "total timeout of " + detail::format_duration(t.req.timeouts.total) +
                        " exceeded";
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

size_t client::impl::header_cb(char* data, size_t size, size_t n, void* user) {
  transfer& t = *static_cast<transfer*>(user);
  const size_t len = size * n;
  t.last_progress = clock::now();
  t.header_bytes += len;
  if (t.header_bytes > self(t).opts_.max_header_bytes) {
    t.forced = error{errc::too_large, "response headers exceed " +
                                          std::to_string(self(t).opts_.max_header_bytes) +
                                          " bytes"};
    return 0;
  }
  std::string_view line(data, len);
  if (auto sl = detail::parse_status_line(line)) {
    // A new response: an interim 1xx has ended, or this is the first status line.
    t.status = sl->status;
    t.reason = std::move(sl->reason);
    t.headers.clear();
    t.head_done = false;
    return len;
  }
  if (t.head_done || t.status == 0) return len;  // trailers, or noise before a status line
  std::string_view content = detail::trim(line);
  if (content.empty()) {
    if (t.status < 200) return len;  // end of an interim response; the real one follows
    t.head_done = true;
    return self(t).on_head_done(t) ? len : 0;
  }
  if ((line.front() == ' ' || line.front() == '\t') && !t.headers.empty()) {
    // Obsolete line folding: continues the previous header's value.
    auto last = std::prev(t.headers.end());
    last->second += " ";
    last->second += content;
    return len;
  }
  auto colon = content.find(':');
  if (colon == std::string_view::npos || colon == 0) return len;  // not a header; ignore
  t.headers.emplace(std::string(detail::trim(content.substr(0, colon))),
                    std::string(detail::trim(content.substr(colon + 1))));
  return len;
}

bool client::impl::on_head_done(transfer& t) {
  const int s = t.status;
  const auto& policy = t.req.redirects;
  if (is_redirect(s) && policy.max_redirects > 0) {
    if (auto loc = first_header(t.headers, "Location"); loc && !loc->empty()) {
      if (t.hop_redirects >= policy.max_redirects) {
        t.forced = error{errc::protocol_error,
                         "too many redirects (" + std::to_string(policy.max_redirects) + ")"};
        return false;
      }
      t.disp = disposition::redirect;
      t.location = std::string(*loc);
      return true;
    }
  }
  if (is_retryable_status(s)) {
    milliseconds delay = backoff(t.failures);
    if (s == 429 || s == 503) {
      if (auto ra = first_header(t.headers, "Retry-After")) {
        if (auto d = detail::parse_retry_after(*ra)) {
          t.retry_after = std::min(*d, opts_.max_retry_after);
          delay = *t.retry_after;
        }
      }
    }
    if (can_retry_status(t, delay)) {
      t.disp = disposition::retry_status;
      return true;
    }
  }
  if (t.resuming) {
    const std::uint64_t want = t.entity_first + t.delivered;
    std::optional<detail::content_range> cr;
    if (auto v = first_header(t.headers, "Content-Range")) cr = detail::parse_content_range(*v);
    bool ok = s == 206 && cr && cr->first == want && cr->last + 1 == t.entity_end &&
              (!cr->total || !t.entity_total || *cr->total == *t.entity_total);
    if (ok) {
      t.disp = disposition::continue_resume;
      return true;
    }
    std::string got = "status " + std::to_string(s);
    if (s == 206) {
      auto v = first_header(t.headers, "Content-Range");
      got += " with Content-Range '" + std::string(v.value_or("")) + "'";
    }
    t.forced = error{errc::protocol_error, "resume at byte " + std::to_string(want) +
                                               ": server answered " + got +
                                               ", refusing to deliver bytes twice"};
    t.forced_retryable = false;
    return false;
  }

  t.disp = disposition::deliver;
  t.final_status = s;
  t.final_url = t.url;
  t.resumable = false;
  if (t.req.resume && t.method == "GET") {
    if (s == 200) {
      if (auto v = first_header(t.headers, "Content-Length")) {
        if (auto len = detail::parse_u64(*v); len && *len > 0) {
          t.resumable = true;
          t.entity_first = 0;
          t.entity_end = *len;
          t.entity_total = *len;
        }
      }
    } else if (s == 206) {
      if (auto v = first_header(t.headers, "Content-Range")) {
        if (auto cr = detail::parse_content_range(*v)) {
          t.resumable = true;
          t.entity_first = cr->first;
          t.entity_end = cr->last + 1;
          t.entity_total = cr->total;
        }
      }
    }
    t.validator.clear();
    if (auto etag = first_header(t.headers, "ETag"); etag && !etag->starts_with("W/")) {
      t.validator = std::string(*etag);
    } else if (auto lm = first_header(t.headers, "Last-Modified")) {
      t.validator = std::string(*lm);
    }
  }
  if (t.cb.on_response) {
    response_head head;
    head.status = s;
    head.reason = t.reason;
    head.headers = t.headers;
    head.url = t.url;
    head.attempt = t.attempts;
    bool go = false;
    try {
      go = t.cb.on_response(head);
    } catch (...) {
      t.forced = error{errc::internal,
                       "on_response threw: " + describe_exception(std::current_exception())};
      t.caller_aborted = true;
      return false;
    }
    if (!go) {
      t.forced = error{errc::cancelled, "aborted by on_response"};
      t.caller_aborted = true;
      return false;
    }
  }
  return true;
}

size_t client::impl::write_cb(char* data, size_t size, size_t n, void* user) {
  transfer& t = *static_cast<transfer*>(user);
  const size_t len = size * n;
  t.last_progress = clock::now();
  switch (t.disp) {
    case disposition::deliver:
    case disposition::continue_resume: {
      if (t.resuming && t.entity_first + t.delivered + len > t.entity_end) {
        t.forced = error{errc::protocol_error, "resume: server sent more than the range"};
        return 0;
      }
      if (t.cb.on_data) {
        bool go = false;
        try {
          go = t.cb.on_data(std::string_view(data, len));
        } catch (...) {
          t.forced = error{errc::internal,
                           "on_data threw: " + describe_exception(std::current_exception())};
          t.caller_aborted = true;
          return 0;
        }
        if (!go) {
          t.forced = error{errc::cancelled, "aborted by on_data"};
          t.caller_aborted = true;
          return 0;
        }
      }
      t.delivered += len;
      t.attempt_delivered += len;
      return len;
    }
    case disposition::redirect:
    case disposition::retry_status:
      t.discarded += len;
      // Past the limit, closing the connection is cheaper than reading the rest.
      return t.discarded > kMaxDiscard ? 0 : len;
    case disposition::undecided:
      break;
  }
  // Body bytes before a complete head cannot happen with HTTP; refuse them.
  t.forced = error{errc::protocol_error, "body before response head"};
  return 0;
}

int client::impl::xfer_cb(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t ulnow) {
  transfer& t = *static_cast<transfer*>(user);
  // Sending the request body is progress too: a large upload is not a stall.
  if (ulnow > t.last_upload) {
    t.last_upload = ulnow;
    t.last_progress = clock::now();
  }
  return 0;
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

error client::impl::curl_failure(const transfer& t, CURLcode code) {
  const errc ec = detail::map_curl_code(code);
  std::string curl_text = t.errbuf[0] != '\0' ? std::string(t.errbuf) : curl_easy_strerror(code);
  while (!curl_text.empty() && curl_text.back() == '\n') curl_text.pop_back();
  const std::string where = t.hop_origin.host + ":" + t.hop_origin.port;
  if (code == CURLE_COULDNT_CONNECT) {
    const long os_err = t.os_errno;
    std::string why = os_err != 0 ? std::strerror(static_cast<int>(os_err)) : "failed";
    return error{ec, "connect to " + where + ": " + why + " (curl: " + curl_text + ")"};
  }
  if (code == CURLE_OPERATION_TIMEDOUT && t.status == 0) {
    return error{ec, "connect to " + where + ": timed out (curl: " + curl_text + ")"};
  }
  return error{ec, curl_text};
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
                  log::kv("offset", t.entity_first + t.delivered),
                  log::kv("cause", err->message));
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
  std::string msg = t.method + " " + detail::redact_url(t.url.empty() ? t.req.url : t.url) +
                    ": " + e.message;
  if (t.attempts > 1) msg += " (after " + std::to_string(t.attempts) + " attempts)";
  e.message = std::move(msg);
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

client::client(client_options opts) : impl_(std::make_unique<impl>(std::move(opts))) {}
client::~client() { impl_->stop(); }
request_id client::submit(request req, callbacks cb) {
  return impl_->submit(std::move(req), std::move(cb));
}
void client::cancel(request_id id) { impl_->cancel(id); }
void client::stop() { impl_->stop(); }
bool client::on_client_thread() const noexcept { return impl_->on_thread(); }

// fetch

result<full_response> fetch(client& c, request req, std::size_t max_body) {
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
      st->out = fail(errc::too_large, r.error().message + ": body exceeds " +
                                          std::to_string(max_body) + " bytes");
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

#pragma once
// Internals of the HTTP client shared by http_client.cc (the multi loop: queueing, timers,
// retries, redirects, completion) and http_client_transfer.cc (one attempt: the easy handle's
// options and curl's callbacks). Not part of the public API.

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/http_client.h"
#include "http_client_util.h"

namespace shoal::http {

using clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

// Bodies of responses the client does not hand over (redirects, statuses it retries) are read
// and dropped so the connection can be reused, up to this much; past it the connection is
// closed instead.
inline constexpr std::uint64_t kMaxDiscard = 1 << 20;
// curl's receive buffer; it still hands the write callback at most 16 KiB at a time.
inline constexpr long kBufferSize = 128 * 1024;

inline bool is_idempotent(std::string_view method) { return method == "GET" || method == "HEAD"; }
inline bool is_redirect(int s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }
inline bool is_retryable_status(int s) { return s == 429 || s == 502 || s == 503 || s == 504; }
inline bool valid_header_text(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}
inline std::optional<std::string_view> first_header(const header_map& h, std::string_view name) {
  auto it = h.find(name);
  if (it == h.end()) return std::nullopt;
  return std::string_view(it->second);
}
std::string describe_exception(std::exception_ptr p);

// What the client does with the response of the current attempt, decided when its head is
// complete.
enum class disposition {
  undecided,        // head not complete yet
  deliver,          // hand head and body to the caller
  continue_resume,  // a 206 continuing a broken body: body to the caller, head not
  redirect,         // follow Location; drop the body
  retry_status,     // 429/502/503/504 that will be retried; drop the body
};

enum class transfer_state {
  waiting_slot,  // queued for a connection slot of its origin
  active,        // an easy handle is in the multi
  backoff,       // waiting until retry_at to start the next attempt
  idle,          // between two states: no handle, no slot, no timer
};

// One submitted request through all its attempts and redirect hops. Lives on the client thread
// in impl::transfers_ from the moment the loop takes it from the inbox until on_complete.
struct transfer {
  request_id id = 0;
  client_request req;
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
  transfer_state state = transfer_state::idle;
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
  // The header the last line added (obsolete line folding continues it): headers is sorted by
  // name, so its last element is not that one.
  std::optional<header_map::iterator> last_header;
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
  std::optional<error> refused;  // the connect policy refused an address of this attempt

  // The policy in force (the request's, else the client's), or null.
  const connect_policy* policy = nullptr;
  bool own_policy = false;  // the request's own: no connection reuse
};

// The multi loop. Everything except the inbox, the cancel list and the stop flag belongs to the
// client thread.
class client::impl {
 public:
  explicit impl(client_options opts);
  ~impl();

  request_id submit(client_request req, callbacks cb);
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
  bool set_transfer_options(transfer& t);  // returns whether a body is sent
  [[nodiscard]] status set_request_headers(transfer& t, bool has_body);
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
  static curl_socket_t open_socket_cb(void* user, curlsocktype purpose, curl_sockaddr* address);
  // The connect policy's verdict on a hop, if the transfer has a policy.
  [[nodiscard]] static status check_hop(const transfer& t, const detail::origin& o);
  bool on_head_done(transfer& t);
  bool on_resumed_head(transfer& t);
  void note_resumable_entity(transfer& t);
  bool offer_head_to_caller(transfer& t);
  static impl& self(transfer& t) { return *static_cast<impl*>(t.owner); }

  client_options opts_;
  CURLM* multi_ = nullptr;
  std::atomic<request_id> next_id_{1};
  std::atomic<std::thread::id> thread_id_{};

  std::mutex mu_;
  bool stopping_ = false;                         // guarded by mu_
  std::vector<std::unique_ptr<transfer>> inbox_;  // guarded by mu_
  std::vector<request_id> cancels_;               // guarded by mu_

  std::mutex join_mu_;
  std::thread thread_;

  // Client thread only.
  std::unordered_map<request_id, std::unique_ptr<transfer>> transfers_;
  std::unordered_map<std::string, host_slots> hosts_;
  bool shutting_down_ = false;  // no new launches while cancelling everything
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace shoal::http

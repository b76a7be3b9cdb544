// The pods running on this node, from containerd's CRI (cri.h).
#include "peerd/cri.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "common/checkpoint.h"
#include "common/log.h"
#include "common/text.h"
#include "common/thread_name.h"

namespace shoal::peerd::cri {

namespace {

// A protobuf reader over untrusted bytes: every read is bounded by what is left.
class pb_reader {
 public:
  explicit pb_reader(std::string_view s) : s_(s) {}
  [[nodiscard]] bool done() const { return i_ >= s_.size(); }

  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (i_ >= s_.size()) return false;
      auto b = static_cast<unsigned char>(s_[i_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;  // more than 10 bytes
  }
  bool key(std::uint32_t& field, std::uint32_t& wire) {
    std::uint64_t k = 0;
    if (!varint(k) || (k >> 3) == 0 || (k >> 3) > 0x1fffffff) return false;
    field = static_cast<std::uint32_t>(k >> 3);
    wire = static_cast<std::uint32_t>(k & 7);
    return true;
  }
  bool bytes(std::string_view& out) {
    std::uint64_t n = 0;
    if (!varint(n) || n > s_.size() - i_) return false;
    out = s_.substr(i_, static_cast<std::size_t>(n));
    i_ += static_cast<std::size_t>(n);
    return true;
  }
  // Skips a field of wire type `wire` (groups, 3 and 4, are refused: proto3 has none).
  bool skip(std::uint32_t wire) {
    std::uint64_t v = 0;
    std::string_view b;
    switch (wire) {
      case 0:
        return varint(v);
      case 1:
        return advance(8);
      case 2:
        return bytes(b);
      case 5:
        return advance(4);
      default:
        return false;
    }
  }

 private:
  bool advance(std::size_t n) {
    if (n > s_.size() - i_) return false;
    i_ += n;
    return true;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

// A Kubernetes-like name: printable ASCII without '/' or spaces, 1..max bytes.
bool name_ok(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 0x7f && c != '/'; });
}

// PodSandboxMetadata { string name = 1; string uid = 2; string namespace = 3; uint32 attempt = 4 }
bool decode_metadata(std::string_view msg, sandbox& s) {
  pb_reader r(msg);
  while (!r.done()) {
    std::uint32_t f = 0, w = 0;
    if (!r.key(f, w)) return false;
    std::string_view v;
    if ((f == 1 || f == 3) && w == 2) {
      if (!r.bytes(v)) return false;
      (f == 1 ? s.name : s.ns).assign(v.substr(0, 512));
    } else if (!r.skip(w)) {
      return false;
    }
  }
  return true;
}

// A map<string,string> entry { string key = 1; string value = 2 }: the value when the key is
// `want`.
bool decode_label(std::string_view msg, std::string_view want, std::optional<std::string>& out) {
  pb_reader r(msg);
  std::string_view k, v;
  bool has_k = false;
  while (!r.done()) {
    std::uint32_t f = 0, w = 0;
    if (!r.key(f, w)) return false;
    if ((f == 1 || f == 2) && w == 2) {
      if (!r.bytes(f == 1 ? k : v)) return false;
      if (f == 1) has_k = true;
    } else if (!r.skip(w)) {
      return false;
    }
  }
  if (has_k && k == want) out = std::string(v.substr(0, 512));
  return true;
}

// PodSandbox { string id = 1; PodSandboxMetadata metadata = 2; PodSandboxState state = 3;
//              int64 created_at = 4; map<string,string> labels = 5; ... }
// READY is 0 (the default, so often absent), NOTREADY 1.
bool decode_sandbox(std::string_view msg, std::string_view job_label, sandbox& s, bool& fits) {
  pb_reader r(msg);
  std::uint64_t state = 0;
  std::optional<std::string> job;
  while (!r.done()) {
    std::uint32_t f = 0, w = 0;
    if (!r.key(f, w)) return false;
    std::string_view v;
    if (f == 1 && w == 2) {
      if (!r.bytes(v)) return false;
      s.id.assign(v.substr(0, 128));
    } else if (f == 2 && w == 2) {
      if (!r.bytes(v) || !decode_metadata(v, s)) return false;
    } else if (f == 3 && w == 0) {
      if (!r.varint(state)) return false;
    } else if (f == 5 && w == 2) {
      if (!r.bytes(v) || !decode_label(v, job_label, job)) return false;
    } else if (!r.skip(w)) {
      return false;
    }
  }
  s.ready = state == 0;
  fits = name_ok(s.name, 253) && name_ok(s.ns, 63);
  if (job) {
    if (checkpoint::valid_job(*job)) {
      s.job = std::move(*job);
    } else {
      fits = false;
    }
  }
  return true;
}

std::once_flag curl_once;

struct call_state {
  std::string body;
  bool too_large = false;
  std::string grpc_status, grpc_message;
};

std::size_t on_body(char* p, std::size_t size, std::size_t n, void* ud) {
  auto* st = static_cast<call_state*>(ud);
  std::size_t len = size * n;
  if (st->body.size() + len > max_response_bytes + 5) {
    st->too_large = true;
    return 0;  // aborts the transfer
  }
  st->body.append(p, len);
  return len;
}

// Headers and trailers alike: gRPC puts grpc-status in the trailers, or in the headers of an
// answer without a body.
std::size_t on_header(char* p, std::size_t size, std::size_t n, void* ud) {
  auto* st = static_cast<call_state*>(ud);
  std::string_view line(p, size * n);
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string value = trim(line.substr(colon + 1));
  if (name == "grpc-status") st->grpc_status = value.substr(0, 8);
  if (name == "grpc-message") st->grpc_message = value.substr(0, 512);
  return size * n;
}

}  // namespace

result<listing> decode_list_pod_sandbox(std::string_view msg, std::string_view job_label) {
  listing out;
  pb_reader r(msg);
  while (!r.done()) {
    std::uint32_t f = 0, w = 0;
    if (!r.key(f, w))
      return fail(errc::protocol_error, "ListPodSandboxResponse: a malformed field key");
    if (f == 1 && w == 2) {
      std::string_view item;
      if (!r.bytes(item))
        return fail(errc::protocol_error, "ListPodSandboxResponse: a truncated sandbox");
      if (out.sandboxes.size() + out.skipped >= max_sandboxes)
        return fail(errc::too_large, "ListPodSandboxResponse lists more than " +
                                         std::to_string(max_sandboxes) + " sandboxes");
      sandbox s;
      bool fits = false;
      if (!decode_sandbox(item, job_label, s, fits))
        return fail(errc::protocol_error, "ListPodSandboxResponse: sandbox " +
                                              std::to_string(out.sandboxes.size() + out.skipped) +
                                              " is malformed");
      if (fits) {
        out.sandboxes.push_back(std::move(s));
      } else {
        ++out.skipped;
      }
    } else if (!r.skip(w)) {
      return fail(errc::protocol_error, "ListPodSandboxResponse: a malformed field " +
                                            std::to_string(f) + " (wire type " + std::to_string(w) +
                                            ")");
    }
  }
  return out;
}

std::string grpc_frame(std::string_view msg) {
  std::string out(5, '\0');
  auto n = static_cast<std::uint32_t>(msg.size());
  out[1] = static_cast<char>((n >> 24) & 0xff);
  out[2] = static_cast<char>((n >> 16) & 0xff);
  out[3] = static_cast<char>((n >> 8) & 0xff);
  out[4] = static_cast<char>(n & 0xff);
  out.append(msg);
  return out;
}

result<std::string> grpc_unframe(std::string_view body) {
  if (body.size() < 5)
    return fail(errc::protocol_error,
                "gRPC answer of " + std::to_string(body.size()) + " bytes has no message frame");
  if (body[0] != 0)
    return fail(errc::protocol_error, "gRPC answer is compressed (none was offered)");
  std::uint32_t n = (static_cast<std::uint32_t>(static_cast<unsigned char>(body[1])) << 24) |
                    (static_cast<std::uint32_t>(static_cast<unsigned char>(body[2])) << 16) |
                    (static_cast<std::uint32_t>(static_cast<unsigned char>(body[3])) << 8) |
                    static_cast<std::uint32_t>(static_cast<unsigned char>(body[4]));
  if (n != body.size() - 5)
    return fail(errc::protocol_error, "gRPC answer frame says " + std::to_string(n) + " bytes, " +
                                          std::to_string(body.size() - 5) + " came");
  return std::string(body.substr(5));
}

std::vector<heartbeat::job_pod> job_pods(const listing& l) {
  std::vector<heartbeat::job_pod> out;
  for (const auto& s : l.sandboxes) {
    if (s.ready && !s.job.empty()) out.push_back({s.job, s.ns + "/" + s.name});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.pod != b.pod ? a.pod < b.pod : a.job < b.job;
  });
  if (out.size() > heartbeat::max_pods) out.resize(heartbeat::max_pods);
  return out;
}

result<std::string> grpc_call(const std::string& socket, const std::string& method,
                              std::string_view request, std::chrono::milliseconds timeout) {
  std::call_once(curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* c = curl_easy_init();
  if (c == nullptr) return fail(errc::internal, "curl_easy_init failed");
  std::string url = "http://localhost" + method;
  std::string framed = grpc_frame(request);
  call_state st;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/grpc");
  headers = curl_slist_append(headers, "TE: trailers");
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, socket.c_str());
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE));
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, framed.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(framed.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &st);
  CURLcode rc = curl_easy_perform(c);
  long http_status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http_status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  const std::string where = method + " on " + socket;
  if (st.too_large)
    return fail(errc::too_large, where + ": the answer is larger than " +
                                     std::to_string(max_response_bytes) + " bytes");
  if (rc != CURLE_OK)
    return fail(rc == CURLE_OPERATION_TIMEDOUT ? errc::timeout : errc::unavailable,
                where + ": " + curl_easy_strerror(rc));
  if (http_status != 200)
    return fail(errc::protocol_error, where + ": HTTP " + std::to_string(http_status));
  if (st.grpc_status.empty())
    return fail(errc::protocol_error, where + ": no grpc-status in the answer");
  if (st.grpc_status != "0")
    return fail(
        errc::unavailable,
        where + ": gRPC status " + st.grpc_status +
            (st.grpc_message.empty() ? std::string() : ": " + quote_excerpt(st.grpc_message, 300)));
  auto msg = grpc_unframe(st.body);
  if (!msg) return fail(msg.error().wrap(where));
  return msg;
}

result<listing> list_pod_sandboxes(const std::string& socket, std::string_view job_label,
                                   std::chrono::milliseconds timeout) {
  auto msg = grpc_call(socket, "/runtime.v1.RuntimeService/ListPodSandbox", {}, timeout);
  if (!msg) return fail(msg.error());
  return decode_list_pod_sandbox(*msg, job_label);
}

pod_watcher::pod_watcher(const node_config& cfg, metrics::registry& reg) : cfg_(cfg) {
  failures_ =
      &reg.counter("shoal_peerd_cri_list_failures_total",
                   "ListPodSandbox calls to node.cri_socket that failed (the log says why).")
           .with({});
  skipped_ = &reg.counter("shoal_peerd_cri_sandboxes_skipped_total",
                          "Pod sandboxes skipped because their name, namespace or job label "
                          "does not fit (per listing).")
                  .with({});
  pods_ = &reg.gauge("shoal_peerd_cri_job_pods",
                     "Ready pods on this node with a job label, at the last listing.")
               .with({});
}

void pod_watcher::list_once() {
  auto l = list_pod_sandboxes(
      cfg_.cri_socket, cfg_.cri_job_label,
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.cri_timeout.get()));
  std::lock_guard lk(mu_);
  if (!l) {
    failures_->inc();
    if (!failing_)
      log::warn("cannot list the node's pods: the scheduler keeps what it knew of them",
                log::kv("socket", cfg_.cri_socket), log::kv("error", l.error().message));
    failing_ = true;
    now_.reset();
    return;
  }
  if (failing_) log::info("listing the node's pods again", log::kv("socket", cfg_.cri_socket));
  failing_ = false;
  if (l->skipped > 0) skipped_->inc(static_cast<double>(l->skipped));
  auto pods = job_pods(*l);
  pods_->set(static_cast<double>(pods.size()));
  now_ = std::move(pods);
}

void pod_watcher::start() {
  if (cfg_.cri_socket.empty() || thread_.joinable()) return;
  list_once();
  thread_ = std::thread([this] {
    name_this_thread("cri-images");
    std::unique_lock lk(mu_);
    for (;;) {
      if (cv_.wait_for(lk, cfg_.cri_interval.get(), [this] { return stop_; })) return;
      lk.unlock();
      list_once();
      lk.lock();
    }
  });
}

void pod_watcher::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::vector<heartbeat::job_pod>> pod_watcher::current() const {
  std::lock_guard lk(mu_);
  return now_;
}

}  // namespace shoal::peerd::cri

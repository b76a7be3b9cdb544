// One attempt of a transfer: the easy handle's options, curl's header, write and progress
// callbacks, the decision taken when a response head is complete, and the failure text.
// Everything here runs on the client thread.

#include <algorithm>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "http_client_impl.h"

namespace shoal::http {

std::string describe_exception(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

status client::impl::setup_easy(transfer& t) {
  t.easy = curl_easy_init();
  if (t.easy == nullptr) return fail(errc::internal, "curl_easy_init failed");
  const bool has_body = set_transfer_options(t);
  if (auto st = set_request_headers(t, has_body); !st) return st;
  if (t.req.customize && (!t.other_origin || t.req.redirects.customize_on_other_origin)) {
    try {
      t.req.customize(t.easy);
    } catch (...) {
      return fail(errc::internal,
                  "customize hook threw: " + describe_exception(std::current_exception()));
    }
  }
  return {};
}

// The easy handle's options for one hop: URL, callbacks, timeouts, TLS, proxy and the method.
bool client::impl::set_transfer_options(transfer& t) {
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
  if (!opts_.ca_file.empty()) {
    curl_easy_setopt(e, CURLOPT_CAINFO, opts_.ca_file.c_str());
    // libcurl keeps a parsed CA store for 24 h by default: a rotated cluster CA would not be
    // seen for a day.
    curl_easy_setopt(e, CURLOPT_CA_CACHE_TIMEOUT, 10L);
  }
  if (!opts_.cert_file.empty()) {
    curl_easy_setopt(e, CURLOPT_SSLCERT, opts_.cert_file.c_str());
    curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!opts_.key_file.empty()) {
    curl_easy_setopt(e, CURLOPT_SSLKEY, opts_.key_file.c_str());
    curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
  }
  if (!opts_.cert_file.empty() || !opts_.ca_file.empty()) {
    // Same floor as the servers (common/tls.h); 1.3 whenever the server has it.
    curl_easy_setopt(e, CURLOPT_SSLVERSION, static_cast<long>(CURL_SSLVERSION_TLSv1_2));
  }
  if (opts_.proxy) curl_easy_setopt(e, CURLOPT_PROXY, opts_.proxy->c_str());
  if (t.policy != nullptr) {
    // Checked requests connect themselves: never through a proxy, every address checked.
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    if (t.policy->address) {
      curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &impl::open_socket_cb);
      curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, &t);
    }
    if (t.own_policy) {
      curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
      curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    }
  }
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
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t.req.body.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, t.req.body.data());
    }
  }
  return has_body;
}

// The caller's headers, minus credentials after an origin change, minus a Range the client
// replaces when resuming; then the resume range and the headers libcurl must not invent.
status client::impl::set_request_headers(transfer& t, bool has_body) {
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
      if (detail::iequals(name, "Authorization") || detail::iequals(name, "Cookie")) continue;
      bool cred = std::any_of(t.req.redirects.credential_headers.begin(),
                              t.req.redirects.credential_headers.end(),
                              [&](const std::string& c) { return detail::iequals(c, name); });
      if (cred) continue;
    }
    if (t.resuming && (detail::iequals(name, "Range") || detail::iequals(name, "If-Range"))) {
      continue;
    }
    if (!t.send_body &&
        (detail::iequals(name, "Content-Type") || detail::iequals(name, "Content-Length"))) {
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
  // No 100-continue round trip, and no form content type invented by curl for raw bodies. Only
  // when there is a body: a removal entry for a header that is never sent would still be listed
  // among the signed headers by libcurl's SigV4 signer, and S3 would refuse the signature.
  if (!has_expect && has_body) ok = ok && add("Expect:");
  if (has_body && !has_ctype) ok = ok && add("Content-Type:");
  if (!ok) return fail(errc::internal, "curl_slist_append failed");
  curl_easy_setopt(t.easy, CURLOPT_HTTPHEADER, t.slist);
  return {};
}

size_t client::impl::header_cb(char* data, size_t size, size_t n, void* user) {
  transfer& t = *static_cast<transfer*>(user);
  const size_t len = size * n;
  t.last_progress = clock::now();
  t.header_bytes += len;
  if (t.header_bytes > self(t).opts_.max_header_bytes) {
    t.forced =
        error{errc::too_large, "response headers exceed " +
                                   std::to_string(self(t).opts_.max_header_bytes) + " bytes"};
    return 0;
  }
  std::string_view line(data, len);
  if (auto sl = detail::parse_status_line(line)) {
    // A new response: an interim 1xx has ended, or this is the first status line.
    t.status = sl->status;
    t.reason = std::move(sl->reason);
    t.headers.clear();
    t.last_header.reset();
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
  if (line.front() == ' ' || line.front() == '\t') {
    // Obsolete line folding: continues the previous header's value.
    if (t.last_header) {
      (*t.last_header)->second += " ";
      (*t.last_header)->second += content;
    }
    return len;
  }
  auto colon = content.find(':');
  if (colon == std::string_view::npos || colon == 0) return len;  // not a header; ignore
  t.last_header = t.headers.emplace(std::string(detail::trim(content.substr(0, colon))),
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
  if (t.resuming) return on_resumed_head(t);
  t.disp = disposition::deliver;
  t.final_status = s;
  t.final_url = t.url;
  t.resumable = false;
  if (t.req.resume && t.method == "GET") note_resumable_entity(t);
  return offer_head_to_caller(t);
}

// A resumed hop must answer 206 with exactly the rest of the range; anything else fails the
// transfer rather than deliver bytes twice.
bool client::impl::on_resumed_head(transfer& t) {
  const int s = t.status;
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
  t.forced =
      error{errc::protocol_error, "resume at byte " + std::to_string(want) + ": server answered " +
                                      got + ", refusing to deliver bytes twice"};
  t.forced_retryable = false;
  return false;
}

// Remembers what a later resume needs: the entity's extent and its validator.
void client::impl::note_resumable_entity(transfer& t) {
  const int s = t.status;
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

// The caller's on_response decides whether the body is wanted.
bool client::impl::offer_head_to_caller(transfer& t) {
  if (t.cb.on_response) {
    response_head head;
    head.status = t.status;
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

curl_socket_t client::impl::open_socket_cb(void* user, curlsocktype purpose,
                                           curl_sockaddr* address) {
  transfer& t = *static_cast<transfer*>(user);
  if (purpose != CURLSOCKTYPE_IPCXN || address == nullptr) return CURL_SOCKET_BAD;
  char ip[INET6_ADDRSTRLEN] = {};
  const void* raw = nullptr;
  if (address->family == AF_INET) {
    raw = &reinterpret_cast<const sockaddr_in*>(&address->addr)->sin_addr;
  } else if (address->family == AF_INET6) {
    raw = &reinterpret_cast<const sockaddr_in6*>(&address->addr)->sin6_addr;
  }
  if (raw == nullptr || ::inet_ntop(address->family, raw, ip, sizeof ip) == nullptr) {
    t.refused = error{errc::unauthorized, "connect to a non-IP address refused"};
    return CURL_SOCKET_BAD;
  }
  status verdict;
  try {
    endpoint hop{t.hop_origin.scheme, t.hop_origin.host, t.hop_origin.port};
    verdict = t.policy->address(hop, ip);
  } catch (...) {
    verdict = fail(errc::internal,
                   "connect policy threw: " + describe_exception(std::current_exception()));
  }
  if (!verdict) {
    t.refused = verdict.error();
    return CURL_SOCKET_BAD;
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

status client::impl::check_hop(const transfer& t, const detail::origin& o) {
  if (t.policy == nullptr || !t.policy->origin) return {};
  try {
    return t.policy->origin(endpoint{o.scheme, o.host, o.port});
  } catch (...) {
    return fail(errc::internal,
                "connect policy threw: " + describe_exception(std::current_exception()));
  }
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

}  // namespace shoal::http

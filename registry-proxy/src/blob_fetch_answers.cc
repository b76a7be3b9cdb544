// blob_fetch's handling of the answers of upstream and of ring members (blob_fetch.h), apart so
// that the header stays within the size rule.
#include "blob_fetch.h"

namespace shoal::proxy {

// Client thread: the answer to a continuation, whose writer holds resume_from_ bytes.
bool blob_fetch::on_continuation(const http::response_head& h) {
  if (h.status == 200) {
    skip_ = resume_from_;  // the source ignored the Range: drop what we have
    return true;
  }
  if (h.status == 206) {
    auto cr = std::string(h.header("Content-Range").value_or(""));
    std::string want = "bytes " + std::to_string(resume_from_) + "-";
    if (cr.rfind(want, 0) == 0) return true;
    capture_error(502, "resume at byte " + std::to_string(resume_from_) +
                           ": source answered Content-Range " + quote_excerpt(cr));
    return false;
  }
  capture_error(h.status >= 400 ? static_cast<unsigned>(h.status) : 502,
                "resume at byte " + std::to_string(resume_from_) + ": source answered HTTP " +
                    std::to_string(h.status));
  return false;
}

// Client thread: the answer of a ring member.
bool blob_fetch::on_ring_response(const http::response_head& h) {
  if (writer_) return on_continuation(h);
  if (h.status == 200) return on_ok(h);
  if (h.status == 421) {
    // The member streams this object from us: we are the owner in its view; fetch upstream.
    svc_.replica_ring()->stats().refused.fetch_add(1);
    next_ = next_step::self_fetch;
    return false;
  }
  if (h.status == 503 && h.header(ring::from_header)) {
    next_ = next_step::take_over;  // the member is shutting down
    return false;
  }
  return retry_as_client_or_pass_on(h);
}

// A refusal of registry-proxy itself that the client's own credential may overcome: the
// request is to be sent again with it (next_).
bool blob_fetch::retry_as_client(const http::response_head& h) {
  if ((h.status != 401 && h.status != 403 && h.status != 404) || who_ != acting_as::proxy ||
      client_.anonymous())
    return false;
  next_ = next_step::retry_as_client;
  return true;
}

// A refusal of registry-proxy itself, which the client's own credential may overcome (the
// request is sent again with it), or an answer passed on to the clients (its status and
// Retry-After kept; the reason in its body, bounded, goes into the failure's message).
bool blob_fetch::retry_as_client_or_pass_on(const http::response_head& h) {
  if (retry_as_client(h)) return false;
  capture_status_ = static_cast<unsigned>(h.status);
  if (auto ra = h.header("Retry-After")) retry_after_capture_ = std::string(*ra);
  return true;
}

// Client thread.
bool blob_fetch::on_response(const http::response_head& h) {
  next_ = next_step::none;
  err_body_.clear();
  if (!source().empty()) return on_ring_response(h);
  // Upstream asks for a token as it would for a first request (a replica taking over from a
  // ring owner that died mid-blob may never have talked to this upstream): fetch one and ask
  // again, with the same Range when this is a continuation.
  if (h.status == 401 && auth_round_ == 0 &&
      svc_.upstreams().note_challenge(*sel_.up, h.headers,
                                      who_ == acting_as::client ? &client_ : nullptr)) {
    next_ = next_step::retry_auth;
    return false;
  }
  if (writer_) {
    // Refused as registry-proxy: the client's credential may do, for the rest as for the whole.
    if (retry_as_client(h)) return false;
    return on_continuation(h);
  }
  if (h.status == 200) return on_ok(h);
  return retry_as_client_or_pass_on(h);
}

}  // namespace shoal::proxy

#include "upstream_range.h"

#include <mutex>
#include <string>

#include <boost/asio/post.hpp>

#include "common/log.h"

namespace shoal::proxy {

namespace net = boost::asio;

namespace {

// Shared by the source and the call on the pool (which may outlive the source: the client left).
struct range_state {
  upstream_range_request req;
  std::mutex mu;
  bool asked = false;  // the upstream call ran (its answer, or the fallback, is set)
  std::string body;
  std::uint64_t pos = 0;
  std::unique_ptr<http::body_source> fallback;
};

// Why upstream's answer is not exactly the range's bytes ("" when it is).
std::string check_answer(const result<http::full_response>& r, const upstream_range_request& q) {
  if (!r) return r.error().message;
  if (r->status != 206) return "upstream answered HTTP " + std::to_string(r->status);
  const std::string want =
      "bytes " + std::to_string(q.off) + "-" + std::to_string(q.off + q.len - 1) + "/";
  auto cr = r->header("Content-Range");
  if (!cr || !cr->starts_with(want))
    return "upstream's Content-Range " + std::string(cr.value_or("(none)")) +
           " is not the range asked";
  if (r->body.size() != q.len)
    return "upstream sent " + std::to_string(r->body.size()) + " bytes of " + std::to_string(q.len);
  return {};
}

void ask_upstream(range_state& s) {
  const auto& q = s.req;
  const std::string path = "/v2/" + q.sel.repo + "/blobs/" + q.id.str();
  const std::vector<std::pair<std::string, std::string>> headers{
      {"Accept", "*/*"},
      {"Range", "bytes=" + std::to_string(q.off) + "-" + std::to_string(q.off + q.len - 1)}};
  const auto max = static_cast<std::size_t>(q.len);
  // Both calls end well within the server's source_timeout (60 s by default): a hung upstream
  // then still leaves time to serve the range from the fetch, as promised, instead of cutting
  // the client off, and holds one of ranges.upstream_concurrency for 15 s at most.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  auto r = q.uc->call(*q.sel.up, q.sel.repo, nullptr, "GET", path, headers, max, deadline);
  // As the fetch does: upstream refused the proxy's own credential, the client may have one.
  if (r && (r->status == 401 || r->status == 403 || r->status == 404) && !q.cred.anonymous())
    r = q.uc->call(*q.sel.up, q.sel.repo, &q.cred, "GET", path, headers, max, deadline);
  std::string why = check_answer(r, q);
  q.running->fetch_sub(1);
  std::unique_ptr<http::body_source> fb;
  if (why.empty()) {
    if (q.m.upstream_ranges) q.m.upstream_ranges->inc();
    if (q.m.upstream_range_bytes) q.m.upstream_range_bytes->inc(static_cast<double>(q.len));
  } else {
    if (q.m.upstream_range_fallbacks) q.m.upstream_range_fallbacks->inc();
    log::info("range asked of upstream not answered; serving it from the fetch",
              log::kv("digest", q.id.str()), log::kv("offset", q.off), log::kv("bytes", q.len),
              log::kv("why", why));
    fb = q.fallback();
  }
  std::lock_guard lk(s.mu);
  s.asked = true;
  if (why.empty())
    s.body = std::move(r->body);
  else
    s.fallback = std::move(fb);
}

// The next piece of the upstream answer (called once the call ran).
void give(range_state& s, std::size_t max_bytes, std::function<void(result<http::chunk>)> done) {
  http::body_source* fb = nullptr;
  std::string piece;
  {
    std::lock_guard lk(s.mu);
    if (s.fallback) {
      fb = s.fallback.get();
    } else if (s.pos < s.body.size()) {
      const std::size_t n = std::min<std::size_t>(max_bytes, s.body.size() - s.pos);
      piece = s.body.substr(static_cast<std::size_t>(s.pos), n);
      s.pos += n;
    }
  }
  // The server asks for one piece at a time: the fallback is never driven concurrently.
  if (fb) return fb->next(max_bytes, std::move(done));
  if (piece.empty()) return done(http::chunk::end());
  done(http::chunk::bytes(std::move(piece)));
}

class source final : public http::body_source {
 public:
  explicit source(upstream_range_request r) : s_(std::make_shared<range_state>()) {
    s_->req = std::move(r);
  }
  ~source() override {
    // Never asked (the client left before the first piece): the slot is free again.
    std::lock_guard lk(s_->mu);
    if (!started_) s_->req.running->fetch_sub(1);
  }

  void next(std::size_t max_bytes, std::function<void(result<http::chunk>)> done) override {
    bool asked;
    {
      std::lock_guard lk(s_->mu);
      asked = s_->asked;
      if (!started_) {
        started_ = true;
        net::post(*s_->req.pool, [s = s_, max_bytes, done = std::move(done)]() mutable {
          ask_upstream(*s);
          give(*s, max_bytes, std::move(done));
        });
        return;
      }
    }
    if (!asked) return done(fail(errc::internal, "upstream range asked for twice at once"));
    give(*s_, max_bytes, std::move(done));
  }

 private:
  std::shared_ptr<range_state> s_;
  bool started_ = false;  // guarded by s_->mu
};

}  // namespace

std::unique_ptr<http::body_source> upstream_range_source(upstream_range_request r) {
  return std::make_unique<source>(std::move(r));
}

}  // namespace shoal::proxy

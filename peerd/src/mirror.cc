#include "mirror.h"

#include "common/checkpoint.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/http_range.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/platform.h"
#include "common/origin_protocol.h"
#include "common/text.h"
#include "common/json_text.h"
#include "proxy_link.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

using origin::oci_error;

namespace {

// How long a reader of a running fetch (download_source, chunked_source) may wait for its next
// bytes, instead of the HTTP server's source timeout: the fetch bounds itself and fails its
// readers when it fails; this bound is a backstop, in case a waiter is never answered.
constexpr std::chrono::milliseconds fetch_reader_wait_limit = std::chrono::minutes(30);

// Streams an object being downloaded (or just downloaded) to one client, in order: while
// downloading, each run of verified pieces whose writes are confirmed in the download's file
// (download::when_in_file) straight from that file with sendfile, and piece by piece through
// read_piece only where the file cannot be opened; once the download is complete, the rest from
// the cache's file with sendfile.
// The object's last byte waits until the object's sha256 verified (download::verified; the
// cache may still be committing it): pieces pass their SHA-1 against metainfo fetched over HTTP,
// so until then a whole body could still be the wrong object. A download that fails instead
// fails the body, and the server cuts the connection short: the client sees a short read, never
// a complete wrong body. A Range that ends at the object's end holds back the same way (a lazy
// reader of ranges has no digest check of its own); other ranges stream as the pieces verify.
class download_source final : public http::body_source {
 public:
  download_source(std::shared_ptr<download> dl, std::uint64_t off, std::uint64_t len,
                  std::atomic<std::uint64_t>* served, net::thread_pool* pool)
      : st_(std::make_shared<state>()) {
    st_->dl = std::move(dl);
    st_->off = off;
    st_->end = len == UINT64_MAX ? st_->dl->meta().size : off + len;
    st_->served = served;
    st_->pool = pool;
    // A Range (not the whole object from byte 0): its pieces before the swarm's own order; the
    // whole object: in order, if so configured (swarm.in_order_readers).
    if (off > 0 || st_->end < st_->dl->meta().size)
      (void)st_->dl->want_range(off, st_->end);
    else
      st_->dl->want_in_order();
  }

  void next(std::size_t max_bytes, std::function<void(result<http::chunk>)> done) override {
    step(st_, max_bytes, std::move(done));
  }
  // A reader may wait longer than the server's source timeout (http.write_timeout, 60 s) for its
  // next piece while the download runs: the piece can be late while every other one arrives (its
  // only copy on one slow connection), and the download bounds itself (the HTTP fallback after
  // swarm.stall_timeout without a verified piece; failure, which fails this body, after
  // swarm.fallback_deadline). Cutting the response then made a pull fail whose download
  // completed seconds later (docs/p2p.md "Where the time goes at 32 nodes").
  [[nodiscard]] std::optional<std::chrono::milliseconds> wait_limit() const override {
    return fetch_reader_wait_limit;
  }

 private:
  struct state {
    std::shared_ptr<download> dl;
    std::uint64_t off = 0, end = 0;
    std::atomic<std::uint64_t>* served = nullptr;
    net::thread_pool* pool = nullptr;
    piece_buffer buf;
    std::uint32_t buf_piece = UINT32_MAX;
    unique_fd fd;             // the committed object file, opened once
    bool no_direct = false;   // the file could not be opened: read_piece only
    unique_fd partial;        // the running download's file, opened once
    bool no_partial = false;  // it could not be opened (moved meanwhile): read_piece
    bool waited = false;      // when_in_file answered: the file, or else read_piece, now
  };
  using done_fn = std::function<void(result<http::chunk>)>;

  // One chunk of the body. Callbacks may run after the source is gone (the client left): they
  // own everything they touch through `st`.
  static void step(const std::shared_ptr<state>& st, std::size_t max_bytes, done_fn done) {
    if (st->off >= st->end) return done(http::chunk::end());
    const std::uint64_t size = st->dl->meta().size;
    std::string path = st->dl->complete_path();  // non-empty once verified and committed
    // Bytes below `limit` may go now; the object's last byte only once it verified.
    std::uint64_t limit = st->end;
    if (path.empty() && st->end == size && !st->dl->verified()) limit = size - 1;
    if (st->off >= limit) {
      st->dl->when_settled([st, max_bytes, done = std::move(done)](shoal::status s) mutable {
        if (!s) {
          log::warn("object did not verify: ending its body short",
                    log::kv("digest", st->dl->id().str()), log::kv("sent", st->off),
                    log::kv("error", s.error().message));
          return done(fail(s.error()));
        }
        step(st, max_bytes, std::move(done));
      });
      return;
    }
    if (st->pool && !st->no_direct && (st->fd || !path.empty())) {
      return send_file(st, std::min<std::uint64_t>(max_bytes, st->end - st->off), std::move(path),
                       &state::fd, &state::no_direct, std::move(done));
    }
    const auto& m = st->dl->meta();
    std::uint32_t piece = static_cast<std::uint32_t>(st->off / m.piece_size);
    if (st->pool && !st->no_partial) {
      const bool waited = std::exchange(st->waited, false);
      if (auto run = st->dl->file_run(st->off, std::min<std::uint64_t>(max_bytes, limit - st->off));
          run > 0) {
        return send_file(st, run, st->dl->partial_path(), &state::partial, &state::no_partial,
                         std::move(done));
      }
      if (!waited) {
        st->dl->when_in_file(piece, [st, max_bytes, done = std::move(done)]() mutable {
          st->waited = true;
          step(st, max_bytes, std::move(done));
        });
        return;
      }
      // Answered but not in the file: the download ended (complete or failed) or moved on.
    }
    auto slice = [st, max_bytes, limit](const piece_buffer& buf, std::uint32_t p) -> http::chunk {
      std::uint64_t from = st->off - st->dl->meta().piece_offset(p);
      std::uint64_t n = std::min<std::uint64_t>({buf->size() - from, limit - st->off, max_bytes});
      std::string out = buf->substr(static_cast<std::size_t>(from), static_cast<std::size_t>(n));
      st->off += n;
      if (st->served) st->served->fetch_add(n);
      return http::chunk::bytes(std::move(out));
    };
    if (st->buf && st->buf_piece == piece) return done(slice(st->buf, piece));
    st->dl->read_piece(piece, [st, piece, slice, done = std::move(done)](result<piece_buffer> b) {
      if (!b) {
        log::warn("object: ending its body short", log::kv("digest", st->dl->id().str()),
                  log::kv("sent", st->off), log::kv("piece", piece),
                  log::kv("error", b.error().message));
        return done(fail(b.error()));
      }
      st->buf = *b;
      st->buf_piece = piece;
      done(slice(st->buf, piece));
    });
  }

  // `run` bytes at the reader's offset from a file with sendfile: the committed object's (`fd`,
  // `no_direct`) or the running download's (`partial`, `no_partial`). The open is disk work: off
  // the server's thread; the fd stays open until this source ends. A file that does not open
  // (evicted, or moved into the cache meanwhile) is not tried again: the next step reads another
  // way (the committed file, or piece by piece, which reports the error).
  static void send_file(const std::shared_ptr<state>& st, std::uint64_t run, std::string path,
                        unique_fd state::*fd, bool state::*unopenable, done_fn done) {
    net::post(*st->pool,
              [st, run, path = std::move(path), fd, unopenable, done = std::move(done)]() mutable {
                auto& f = (*st).*fd;
                if (!f) f = unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
                if (!f) {
                  (*st).*unopenable = true;
                  return done(http::chunk::file_region(-1, 0, 0));
                }
                std::uint64_t off = st->off;
                st->off += run;
                if (st->served) st->served->fetch_add(run);
                done(http::chunk::file_region(f.get(), off, run));
              });
  }

  std::shared_ptr<state> st_;
};

// Streams a blob fetched in chunks (chunked.h) to one client, in order.
class chunked_source final : public http::body_source {
 public:
  chunked_source(std::shared_ptr<chunked_blob> cb, std::uint64_t off, std::uint64_t len,
                 std::atomic<std::uint64_t>* served)
      : cb_(std::move(cb)), off_(std::make_shared<std::uint64_t>(off)), served_(served) {
    end_ = len == UINT64_MAX ? cb_->size() : off + len;
    if (off > 0 || end_ < cb_->size())
      cb_->want_range(off, end_);
    else
      cb_->want_in_order();
  }

  void next(std::size_t max_bytes, std::function<void(result<http::chunk>)> done) override {
    if (*off_ >= end_) return done(http::chunk::end());
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(max_bytes, end_ - *off_));
    cb_->read(
        *off_, n,
        [cb = cb_, off = off_, served = served_, done = std::move(done)](result<std::string> b) {
          if (!b) {
            // The client sees its body end short: the cause is here.
            log::warn("blob fetched in chunks: ending its body short",
                      log::kv("digest", cb->id().str()), log::kv("sent", *off),
                      log::kv("error", b.error().message));
            return done(fail(b.error()));
          }
          *off += b->size();
          if (served) served->fetch_add(b->size());
          done(http::chunk::bytes(std::move(*b)));
        });
  }
  // Like download_source: the reader may wait longer than the server's source timeout for a
  // chunk registry-proxy has not cut yet (its upstream slow or held) or for a piece of a joined
  // chunk, and the fetch bounds itself (no chunk listed for swarm.fallback_deadline fails it; each
  // chunk's download has its stall fallback and fallback_deadline; a failure fails this body).
  // Cutting the response instead ended a pull after chunk 0 while its fetch completed.
  [[nodiscard]] std::optional<std::chrono::milliseconds> wait_limit() const override {
    return fetch_reader_wait_limit;
  }

 private:
  std::shared_ptr<chunked_blob> cb_;
  std::shared_ptr<std::uint64_t> off_;
  std::uint64_t end_ = 0;
  std::atomic<std::uint64_t>* served_;
};

}  // namespace

namespace {

// A path segment with its %XX escapes decoded (a malformed escape stays as it is).
std::string decoded_segment(std::string_view seg) {
  std::string out;
  out.reserve(seg.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < seg.size(); ++i) {
    if (seg[i] == '%' && i + 2 < seg.size() && hex(seg[i + 1]) >= 0 && hex(seg[i + 2]) >= 0) {
      out += static_cast<char>(hex(seg[i + 1]) * 16 + hex(seg[i + 2]));
      i += 2;
    } else {
      out += seg[i];
    }
  }
  return out;
}

// Why a request path must be refused before it is routed or relayed (a relay's URL library
// would resolve it into another path on registry-proxy): a "." or ".." segment, plain or
// percent-encoded; under /v2 (where every legitimate segment is a name component, a reference or
// a digest) also an empty segment, a backslash and an encoded slash. Empty when the path is clean.
std::string unsafe_path(std::string_view path) {
  const bool v2 = path == "/v2" || path.starts_with("/v2/");
  if (v2 && path.find('\\') != std::string_view::npos) return "a backslash";
  std::size_t pos = 1;
  while (pos <= path.size()) {
    std::size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string seg = decoded_segment(path.substr(pos, end - pos));
    if (seg == "." || seg == "..") return "a dot segment";
    if (v2 && seg.empty() && end < path.size()) return "an empty segment";
    if (v2 && seg.find_first_of("/\\") != std::string::npos) return "an encoded slash or backslash";
    pos = end + 1;
  }
  return {};
}

// The blobs an image manifest names, with their sizes: its config, then its layers. Descriptors
// without a valid digest are skipped, a size that is not a count reads as 0 (a manifest is the
// registry's input: nothing in it may throw).
std::vector<std::pair<digest, std::uint64_t>> manifest_blobs(const nlohmann::json& manifest) {
  std::vector<std::pair<digest, std::uint64_t>> out;
  auto add = [&](const nlohmann::json& desc) {
    if (!desc.is_object() || !desc.contains("digest") || !desc["digest"].is_string()) return;
    auto d = digest::parse(desc["digest"].get<std::string>());
    if (!d) return;
    const auto* size = desc.contains("size") ? &desc["size"] : nullptr;
    out.emplace_back(*d, size && size->is_number_unsigned() ? size->get<std::uint64_t>() : 0);
  };
  if (manifest.contains("config")) add(manifest["config"]);
  if (manifest.contains("layers") && manifest["layers"].is_array()) {
    for (const auto& l : manifest["layers"]) add(l);
  }
  return out;
}

}  // namespace

mirror::mirror(deps d) : d_(d) {
  cache_hits_ =
      &d_.metrics.counter("shoal_peerd_blob_cache_hits_total", "Blobs served from the local cache.")
           .with({});
  forward_errors_ = &forward_errors_counter(d_.metrics);
  prefetches_ = &d_.metrics
                     .counter("shoal_peerd_layer_prefetches_total",
                              "Blobs fetched because an image manifest served here named them "
                              "(mirror.prefetch_layers), before containerd asked for them.")
                     .with({});
}

std::string mirror::proxy_url(const std::string& path_and_query) const {
  return peerd::proxy_url(d_.proxy, d_.cfg.upstream, path_and_query);
}

void mirror::operator()(http::request&& req, http::responder resp) {
  auto health = [this] {
    daemon::health h;
    return h;
  };
  if (daemon::serve_ops(req, resp, d_.metrics, health)) return;
  // Nothing is routed or relayed on a path that means another one once normalized.
  if (auto why = unsafe_path(req.path); !why.empty()) {
    return resp.send(oci_error(400, oci::error_code::name_invalid,
                               "path " + quote_excerpt(req.path, 200) + " has " + why));
  }
  if (req.path == origin::paths::node_status) return handle_status(resp);
  if (req.path == origin::paths::node_pull) return handle_pull(req, resp);
  if (d_.datasets && req.path.starts_with(origin::paths::datasets) && d_.datasets(req, resp))
    return;
  if (d_.checkpoints && req.path.starts_with(checkpoint::paths::node) && d_.checkpoints(req, resp))
    return;
  if (req.path.rfind("/v2", 0) != 0)
    return resp.send(oci_error(404, oci::error_code::unsupported, "no such endpoint"));
  if (req.method != http::verb::get && req.method != http::verb::head) {
    return resp.send(
        oci_error(405, oci::error_code::unsupported, "peerd serves the pull API only"));
  }
  // /v2/ and /v2/<name>/blobs/<digest>: ours; a manifest goes to registry-proxy; anything else
  // is answered here as registry-proxy would (it serves no other /v2 path), never relayed.
  origin::route_error err;
  auto route = origin::parse_v2_path(req.path, err);
  if (!route) return resp.send(oci_error(err.status, err.code, err.message));
  if (route->kind == origin::route_kind::base) return resp.send(origin::v2_base_ok());
  if (route->kind == origin::route_kind::blob) {
    auto ns = req.query_param(origin::params::ns).value_or("");
    if (!ns.empty() && !oci::valid_registry_host(ns)) {
      return resp.send(oci_error(400, oci::error_code::name_invalid, "ns is not a registry host"));
    }
    std::string auth(req.header("Authorization"));
    return serve_blob(ns, route->name, route->blob, auth, req.method == http::verb::head,
                      std::string(req.header("Range")), resp);
  }
  std::optional<origin::object_ref> manifest_of;
  if (route->kind == origin::route_kind::manifest && req.method == http::verb::get &&
      d_.cfg.mirror.prefetch_layers) {
    auto ns = req.query_param(origin::params::ns).value_or("");
    if (ns.empty() || oci::valid_registry_host(ns))
      manifest_of = origin::object_ref{std::string(ns), route->name};
  }
  net::post(d_.pool, [this, req = std::move(req), resp, manifest_of]() mutable {
    forward(req, resp, manifest_of);
  });
}

std::size_t mirror::prefetch_layers(const origin::object_ref& where, std::string_view manifest,
                                    const std::string& auth) {
  // Image manifests only (an index names manifests, not blobs: the platform's manifest follows).
  auto j = nlohmann::json::parse(manifest, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("layers") || !j["layers"].is_array())
    return 0;
  auto blobs = manifest_blobs(j);
  constexpr std::size_t max_blobs = 128;
  if (blobs.size() > max_blobs) blobs.resize(max_blobs);
  std::size_t started = 0;
  for (const auto& blob : blobs) {
    const digest& d = blob.first;
    if (d_.store.contains(d) || d_.fetch.find(d)) continue;
    d_.fetch.join(where, d, auth, [id = d](fetch_start s) {
      if (!s) {
        log::info("layer prefetch did not start", log::kv("digest", id.str()),
                  log::kv("status", s.error().status), log::kv("error", s.error().why.message));
      }
    });
    ++started;
  }
  if (started > 0) {
    prefetches_->inc(started);
    log::info("prefetching an image's blobs", log::kv("repo", where.repo), log::kv("ns", where.ns),
              log::kv("blobs", started), log::kv("named", blobs.size()));
  }
  return started;
}

void mirror::forward(const http::request& req, const http::responder& resp,
                     const std::optional<origin::object_ref>& manifest_of) {
  http::client_request r;
  r.method = req.method == http::verb::head ? "HEAD" : "GET";
  r.url = req.target;
  if (auto accept = req.header_list("Accept"); !accept.empty())
    r.headers.emplace_back("Accept", accept);
  if (auto auth = req.header("Authorization"); !auth.empty())
    r.headers.emplace_back("Authorization", std::string(auth));
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.request_timeout.get());
  // containerd waits on us: a hung registry-proxy must turn into an error it can fall back on,
  // not into a second full stall timeout.
  r.max_retries = 0;
  auto f = proxy_call(d_.proxy, d_.cfg.upstream, d_.http, std::move(r), 8u << 20);
  if (!f) {
    forward_errors_->inc();
    unsigned s = f.error().is(errc::timeout) ? 504 : 502;
    return resp.send(
        oci_error(s, oci::error_code::unsupported, "registry-proxy: " + f.error().message));
  }
  http::response out;
  out.status = static_cast<unsigned>(f->status);
  for (const char* h : {"Content-Type", "Docker-Content-Digest", "Docker-Distribution-API-Version",
                        "Warning", "WWW-Authenticate", "Retry-After", "ETag", "OCI-Namespace"}) {
    if (auto v = f->header(h)) out.headers.set(h, std::string(*v));
  }
  if (manifest_of && f->status == 200)
    (void)prefetch_layers(*manifest_of, f->body, std::string(req.header("Authorization")));
  if (req.method == http::verb::head) {
    if (auto v = f->header("Content-Length")) out.headers.set("Content-Length", std::string(*v));
  } else {
    out.body = std::move(f->body);
  }
  resp.send(std::move(out));
}

namespace {

// The one bounded range ("bytes=a-b", the form a lazy reader sends) a Range header asks for;
// nullopt for anything else (the HTTP server interprets those once the size is known). The size
// is not known yet: against an unbounded one, open ranges (`a-`, `-n`) end at its last byte.
std::optional<http::byte_range> bounded_range(std::string_view h) {
  constexpr std::uint64_t unbounded = UINT64_MAX;
  auto spec = http::parse_range(h, unbounded);
  if (spec.kind != http::range_kind::single || spec.range.last >= unbounded - 1)
    return std::nullopt;
  return spec.range;
}

}  // namespace

void mirror::serve_blob(const std::string& ns, const std::string& repo, const digest& d,
                        const std::string& auth, bool head, const std::string& range,
                        const http::responder& resp) {
  net::post(d_.pool, [this, ns, repo, d, auth, head, range, resp] {
    const origin::object_ref where{ns, repo};
    // Bytes held here (cached, or being fetched for someone) go only to a client registry-proxy
    // allows: a public blob, or this credential confirmed for this repository (blob_access.h).
    // Checked on what is then served, the reader or the fetch in hand: an object committed or a
    // fetch started by another client between a look and the answer is checked all the same.
    // 1. The local cache.
    if (auto rd = d_.store.open_read(d)) {
      if (auto refused = d_.access.check(where, d, auth)) return resp.send(std::move(*refused));
      http::response r;
      r.status = 200;
      r.headers.set("Docker-Content-Digest", d.str());
      r.headers.set("Content-Type", "application/octet-stream");
      r.rangeable = true;
      std::uint64_t size = rd->size();
      r.body = http::file_body{std::make_shared<unique_fd>(rd->release()), 0, size};
      cache_hits_->inc();
      if (!head) d_.swarm.counters_mut().served_local.fetch_add(size);
      return resp.send(std::move(r));
    }
    // 2. A fetch in progress.
    if (auto h = d_.fetch.find(d)) {
      if (auto refused = d_.access.check(where, d, auth)) return resp.send(std::move(*refused));
      return respond_from(h, resp);
    }
    // 3. HEAD of something we do not have: registry-proxy knows.
    if (head) {
      http::request fake;
      fake.method = http::verb::head;
      fake.target = origin::blob_target({ns, repo}, d);
      if (!auth.empty()) fake.headers.set("Authorization", auth);
      return forward(fake, resp, std::nullopt);
    }
    // 4. Fetch it (one metainfo request per object, however many ask).
    d_.fetch.join(
        where, d, auth,
        [this, where, d, auth, resp](fetch_start s) {
          if (!s) {
            const auto& f = s.error();
            auto r = oci_error(f.status, origin::code_for_status(f.status), f.why.message);
            if (!f.retry_after.empty()) r.headers.set("Retry-After", f.retry_after);
            return resp.send(std::move(r));
          }
          // Joined a fetch another client started (or one registry-proxy cut into chunks): this
          // client's own credential is confirmed first, off the thread answering every joiner.
          if (d_.access.known_allowed(where, d, auth)) return respond_from(*s, resp);
          net::post(d_.pool, [this, h = *s, where, d, auth, resp] {
            try {
              if (auto refused = d_.access.confirm(where, d, auth))
                return resp.send(std::move(*refused));
              respond_from(h, resp);
            } catch (const std::exception& e) {
              log::error("blob access check failed", log::kv("error", e.what()));
              resp.send(oci_error(500, oci::error_code::unsupported, "internal error"));
            }
          });
        },
        bounded_range(range));
  });
}

namespace {

// A 200 for a blob whose bytes a body source streams as they arrive (ranges too).
http::response streamed_blob(
    const digest& d, std::uint64_t size,
    std::function<std::unique_ptr<http::body_source>(std::uint64_t, std::uint64_t)> open) {
  http::response r;
  r.status = 200;
  r.headers.set("Docker-Content-Digest", d.str());
  r.headers.set("Content-Type", "application/octet-stream");
  r.rangeable = true;
  r.body = http::stream_body{size, std::move(open)};
  return r;
}

}  // namespace

void mirror::respond_from(const fetch_handle& h, const http::responder& resp) {
  auto* served = &d_.swarm.counters_mut().served_local;
  if (auto dl = h.dl) {
    auto* pool = &d_.pool;
    return resp.send(streamed_blob(
        dl->id(), dl->meta().size, [dl, served, pool](std::uint64_t off, std::uint64_t len) {
          return std::make_unique<download_source>(dl, off, len, served, pool);
        }));
  }
  auto cb = h.chunked;
  resp.send(streamed_blob(cb->id(), cb->size(), [cb, served](std::uint64_t off, std::uint64_t len) {
    return std::make_unique<chunked_source>(cb, off, len, served);
  }));
}

// One manifest of `ref` (by tag or digest) through registry-proxy, parsed; blocking.
result<nlohmann::json> mirror::pull_manifest(const oci::image_ref& ref,
                                             const std::string& reference,
                                             const std::string& auth) {
  http::client_request r;
  r.url = origin::manifest_target({ref.registry, ref.repository}, reference);
  r.headers.emplace_back("Accept", std::string(oci::media::accept_all));
  if (!auth.empty()) r.headers.emplace_back("Authorization", auth);
  r.timeouts.connect =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.request_timeout.get());
  auto f = proxy_call(d_.proxy, d_.cfg.upstream, d_.http, std::move(r), 8u << 20);
  if (!f) return fail(f.error());
  if (f->status != 200)
    return fail(errc::upstream_error,
                "manifest " + reference + ": HTTP " + std::to_string(f->status));
  auto j = nlohmann::json::parse(f->body, nullptr, false);
  if (j.is_discarded()) return fail(errc::protocol_error, "manifest " + reference + " is not JSON");
  return j;
}

void mirror::handle_pull(const http::request& req, const http::responder& resp) {
  if (req.method != http::verb::post)
    return resp.send(http::response::json(405, R"({"error":"use POST"})"));
  auto body = nlohmann::json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("image") ||
      !body["image"].is_string()) {
    return resp.send(
        http::response::json(400, R"({"error":"body must be {\"image\": \"<reference>\"}"})"));
  }
  auto ref = oci::parse_image_ref(body["image"].get<std::string>());
  if (!ref) {
    nlohmann::json e = {{"error", ref.error().message}};
    return resp.send(http::response::json(400, json_text(e)));
  }
  if (body.contains("platform") && !body["platform"].is_string())
    return resp.send(http::response::json(400, R"({"error":"platform must be a string"})"));
  std::string platform = json_string(body, "platform", "linux/amd64");
  std::string auth(req.header("Authorization"));
  // A pull holds a worker while it waits for each blob, and the last steps of a download (its
  // hash check, its commit) run on the same pool: at most half the pool pulls at once, so those
  // steps always find a thread. The rest are told to come back (shoalctl pull waits and asks
  // again).
  const int cap = std::max(1, d_.cfg.worker_threads / 2);
  if (pulls_running_.fetch_add(1) >= cap) {
    pulls_running_.fetch_sub(1);
    auto busy = http::response::json(
        429, json_text(nlohmann::json{{"error", std::to_string(cap) +
                                                    " pulls are running on this node (half of "
                                                    "worker_threads); try again"}}));
    busy.headers.set("Retry-After", "1");
    return resp.send(std::move(busy));
  }
  struct slot {
    std::atomic<int>* n;
    ~slot() { n->fetch_sub(1); }
  };
  auto held = std::make_shared<slot>(&pulls_running_);  // constructed once, never copied
  net::post(d_.pool, [this, ref = *ref, platform, auth, resp, held] {
    auto t0 = steady::now();
    nlohmann::json out;
    auto top = pull_manifest(ref, ref.dig ? ref.dig->str() : ref.tag, auth);
    if (!top) {
      out["error"] = top.error().message;
      return resp.send(http::response::json(502, json_text(out)));
    }
    nlohmann::json manifest = *top;
    if (manifest.contains("manifests")) {
      // An index: pick the platform.
      std::string chosen = oci::index_manifest_for(manifest, platform);
      if (chosen.empty()) {
        out["error"] = "no manifest for platform " + platform;
        return resp.send(http::response::json(404, json_text(out)));
      }
      auto sub = pull_manifest(ref, chosen, auth);
      if (!sub) {
        out["error"] = sub.error().message;
        return resp.send(http::response::json(502, json_text(out)));
      }
      manifest = *sub;
    }
    const auto blobs = manifest_blobs(manifest);
    std::uint64_t total = 0;
    nlohmann::json results = nlohmann::json::array();
    bool ok = true;
    for (const auto& [dd, size] : blobs) {
      const origin::object_ref where{ref.registry, ref.repository};
      bool had = d_.store.contains(dd);
      auto st = d_.fetch.ensure(where, dd, auth);
      // A blob already here (or fetched for someone else) proves nothing about this caller:
      // registry-proxy confirms its credential before it learns anything about the blob,
      // cached_before included.
      if (st) {
        if (auto refused = d_.access.check(where, dd, auth)) {
          std::string msg = "registry-proxy answered HTTP " + std::to_string(refused->status);
          if (auto* b = std::get_if<std::string>(&refused->body)) {
            if (auto why = origin::error_message_of(*b); !why.empty()) msg += ": " + why;
          }
          st = fail(errc::unauthorized, msg);
        }
      }
      total += size;
      nlohmann::json item = {{"digest", dd.str()},
                             {"size", size},
                             {"ok", static_cast<bool>(st)},
                             {"error", st ? std::string() : st.error().message}};
      if (st) item["cached_before"] = had;
      results.push_back(std::move(item));
      ok = ok && static_cast<bool>(st);
    }
    out["image"] = ref.str();
    out["blobs"] = results;
    out["bytes"] = total;
    out["seconds"] = std::chrono::duration<double>(steady::now() - t0).count();
    out["ok"] = ok;
    resp.send(http::response::json(ok ? 200 : 502, json_text(out)));
  });
}

}  // namespace shoal::peerd

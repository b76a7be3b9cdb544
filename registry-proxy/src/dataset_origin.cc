#include "registry-proxy/dataset_origin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <future>
#include <thread>

#include "common/fd.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/text.h"

namespace shoal::proxy {

namespace {

// Reads [0, n) of fd into the hasher (the bytes of an interrupted fetch, before resuming).
status hash_prefix(int fd, std::uint64_t n, sha256_hasher& h) {
  std::vector<char> buf(1 << 20);
  std::uint64_t off = 0;
  while (off < n) {
    auto want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), n - off));
    ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "read staging file");
    }
    if (r == 0) return fail(errc::size_mismatch, "staging file ended early");
    h.update(buf.data(), static_cast<std::size_t>(r));
    off += static_cast<std::uint64_t>(r);
  }
  return {};
}

// A Content-Range header's first byte ("bytes 100-199/200" → 100).
std::optional<std::uint64_t> range_start(std::string_view v) {
  auto sp = v.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  v.remove_prefix(sp + 1);
  auto dash = v.find('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  std::uint64_t n = 0;
  for (char c : v.substr(0, dash)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n;
}

std::string trim_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// A fetch's staging file: the bytes received so far (a prefix of the object) and their hash.
struct staging_file {
  std::string path;
  unique_fd fd;
  std::uint64_t have = 0;
  std::unique_ptr<sha256_hasher> hasher = std::make_unique<sha256_hasher>();

  // Empties the file to fetch the object from its first byte; nothing changes if that fails.
  status start_over() {
    if (::ftruncate(fd.get(), 0) != 0) return fail_errno(errno, "truncate " + path);
    hasher = std::make_unique<sha256_hasher>();
    have = 0;
    return {};
  }

  // Writes `chunk` at the end of what the file has and hashes it.
  status append(std::string_view chunk) {
    std::size_t off = 0;
    while (off < chunk.size()) {
      ssize_t n = ::pwrite(fd.get(), chunk.data() + off, chunk.size() - off,
                           static_cast<off_t>(have + off));
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail_errno(errno, "write " + path);
      }
      off += static_cast<std::size_t>(n);
    }
    hasher->update(chunk.data(), chunk.size());
    have += chunk.size();
    return {};
  }
};

// Opens (or creates) a staging file and keeps what an earlier fetch left in it when it can be a
// prefix of an object of `size` bytes and reads back whole (rep.resumed_bytes); otherwise empties
// it.
result<staging_file> open_staging(std::string path, std::uint64_t size, fetch_report& rep) {
  staging_file sf;
  sf.path = std::move(path);
  sf.fd.reset(::open(sf.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!sf.fd) return fail_errno(errno, "open " + sf.path);
  struct stat st {};
  if (::fstat(sf.fd.get(), &st) != 0) return fail_errno(errno, "stat " + sf.path);
  sf.have = static_cast<std::uint64_t>(st.st_size);
  if (sf.have > size) {
    if (auto s = sf.start_over(); !s) return fail(s.error());
  }
  if (sf.have > 0) {
    if (auto s = hash_prefix(sf.fd.get(), sf.have, *sf.hasher); !s) {
      if (auto t = sf.start_over(); !t) return fail(t.error());
    } else {
      rep.resumed_bytes = sf.have;
    }
  }
  return sf;
}

// What one request of a fetch came to.
struct attempt {
  result<http::completion> res;
  int status = 0;            // the status on_response saw (a refused one ends the request aborted)
  std::optional<error> err;  // why the fetch's own callbacks stopped the transfer
};

// One request for the rest of an object of `size` bytes (`req` asks from sf.have): its body goes
// to the staging file. A 200 to a resume starts the file over; a 206 must start where asked.
attempt request_rest(http::client& http, http::client_request req, const std::string& where,
                     std::uint64_t size, staging_file& sf, fetch_report& rep,
                     const std::function<void(std::uint64_t)>& progress,
                     const std::atomic<bool>& cancel, staging_budget* budget) {
  struct state_t {
    int status = 0;
    bool restart = false;
    std::optional<error> err;
    std::uint64_t unchecked = 0;  // bytes written since the free space was last checked
  };
  auto st_ = std::make_shared<state_t>();
  std::promise<result<http::completion>> done;
  auto fut = done.get_future();
  const std::uint64_t from = sf.have;
  http::callbacks cb;
  cb.on_response = [&, st_, from](const http::response_head& h) {
    st_->status = h.status;
    if (h.status == 206) {
      auto cr = h.header("Content-Range");
      auto start = cr ? range_start(*cr) : std::nullopt;
      if (!start || *start != from) {
        st_->err =
            error{errc::protocol_error, where + ": the origin answered another range than asked"};
        return false;
      }
      return true;
    }
    if (h.status == 200) {
      // The origin ignored our Range (or we asked from 0): start over.
      st_->restart = from > 0;
      return true;
    }
    return false;
  };
  cb.on_data = [&, st_](std::string_view chunk) {
    if (cancel.load()) return false;
    if (st_->restart) {
      st_->restart = false;
      if (auto s = sf.start_over(); !s) {
        st_->err = s.error();
        return false;
      }
      rep.resumed_bytes = 0;
    }
    if (sf.have + chunk.size() > size) {
      st_->err = error{errc::size_mismatch,
                       where + " is longer than the listing said (it changed at the origin)"};
      return false;
    }
    // The free space, again while writing (others write to the filesystem too).
    st_->unchecked += chunk.size();
    if (budget != nullptr && st_->unchecked >= (8u << 20)) {
      st_->unchecked = 0;
      if (auto s = budget->check_free(size - sf.have); !s) {
        st_->err = s.error();
        return false;
      }
    }
    if (auto s = sf.append(chunk); !s) {
      st_->err = s.error();
      return false;
    }
    rep.origin_bytes += chunk.size();
    if (progress) progress(chunk.size());
    return true;
  };
  cb.on_complete = [&done](result<http::completion> r) { done.set_value(std::move(r)); };
  http.submit(std::move(req), std::move(cb));
  auto res = fut.get();
  return attempt{std::move(res), st_->status, st_->err};
}

// Whether a callback's error ends the fetch without a retry: the object changed, or the disk is
// full.
bool ends_fetch(const error& e) {
  if (e.is(errc::size_mismatch) || e.is(errc::no_space)) return true;
  return e.code.category() == std::system_category() && e.code.value() == ENOSPC;
}

// The error for a status that says retrying is pointless (gone, or access refused), if it is one.
std::optional<error> refusal(int status, const std::string& where) {
  if (status == 404 || status == 410) {
    return error{errc::not_found,
                 where + ": the origin no longer has it (HTTP " + std::to_string(status) + ")"};
  }
  if (status == 401 || status == 403) {
    return error{errc::unauthorized,
                 where + ": the origin refused access (HTTP " + std::to_string(status) + ")"};
  }
  return std::nullopt;
}

// Why a retried request failed, for the log and the final error.
std::string failure_reason(const attempt& a, int status) {
  return a.err                                           ? a.err->message
         : status != 0 && status != 200 && status != 206 ? "HTTP " + std::to_string(status)
         : !a.res                                        ? a.res.error().message
                                                         : "HTTP " + std::to_string(status);
}

// Sleeps in 50 ms steps until `limit` has passed or `done()` holds (checked before each step).
template <class Done>
void poll_for(std::chrono::milliseconds limit, Done&& done) {
  for (auto t = std::chrono::milliseconds(0); t < limit && !done();
       t += std::chrono::milliseconds(50)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Hands a complete, verified staging file to the cache; bytes the cache already holds (or that
// another fetch is adopting) are no error. The staging file is gone afterwards, except when the
// adoption failed for another reason than a digest mismatch.
status adopt_staged(cache::store& store, const std::string& path, const digest& id,
                    const std::string& where, const std::atomic<bool>& cancel) {
  auto s = store.adopt_file(path, id, cache::object_kind::dataset_file);
  if (!s && s.error().is(errc::busy)) {
    // Someone else is writing the same bytes (another path with the same content): wait for it.
    poll_for(std::chrono::milliseconds(600 * 50),
             [&] { return store.contains(id) || cancel.load(); });
    if (store.contains(id)) s = {};
  }
  if (!s && !s.error().is(errc::already_exists)) {
    if (s.error().is(errc::digest_mismatch)) ::unlink(path.c_str());
    return fail(s.error().wrap("cache " + where));
  }
  ::unlink(path.c_str());  // no-op when adopted (renamed away)
  return {};
}

}  // namespace

bool resumable_failure(const error& e) {
  if (e.code.category() != shoal_category()) return false;  // the disk (write, open, truncate)
  for (errc c : {errc::size_mismatch, errc::digest_mismatch, errc::not_found, errc::unauthorized,
                 errc::no_space, errc::too_large, errc::invalid_argument}) {
    if (e.is(c)) return false;
  }
  return true;
}

std::string staging_name(const std::string& origin_url, const origin_object& o) {
  std::string id = origin_url + "\n" + o.path + "\n" + std::to_string(o.size) + "\n" + o.version;
  return sha256_of(id).hex();
}

namespace {

// The file a relative credentials name means (inside `dir`), or the name itself if absolute.
std::string credentials_path(const std::string& dir, const std::string& name) {
  if (name.empty() || name.front() == '/' || dir.empty()) return name;
  return trim_slashes(dir) + "/" + name;
}

// Without an allowlist (unit tests): a declaration may name a file inside credentials_dir, or
// use the process's AWS_* variables.
result<std::string> declared_credentials(const dataset::declaration& d, const origin_options& o) {
  if (d.origin.credentials_file.empty()) return std::string();
  // A declaration comes from a client: it may only name a file inside credentials_dir, or it
  // could make registry-proxy send the first line of any file it can read to any endpoint.
  if (o.credentials_dir.empty()) {
    return fail(errc::config_error, "dataset origin names credentials_file " +
                                        quote_excerpt(d.origin.credentials_file) +
                                        " but datasets.credentials_dir is not configured");
  }
  if (auto s = dataset::check_path(d.origin.credentials_file); !s) {
    return fail(errc::invalid_argument,
                "credentials_file must be a relative name inside datasets.credentials_dir: " +
                    s.error().message);
  }
  return credentials_path(o.credentials_dir, d.origin.credentials_file);
}

// With an allowlist: the credentials the configuration binds to the S3 endpoint, never chosen by
// the declaration (which may repeat the bound name, or leave it out).
result<s3::credentials> bound_credentials(const dataset::declaration& d, const origin_options& o,
                                          const allowed_origin& a, const std::string& endpoint) {
  if (!a.buckets.empty() &&
      std::find(a.buckets.begin(), a.buckets.end(), d.origin.bucket) == a.buckets.end()) {
    return fail(errc::unauthorized, "bucket " + quote_excerpt(d.origin.bucket) +
                                        " is not among the buckets datasets.allowed_origins "
                                        "allows at " +
                                        endpoint);
  }
  if (!d.origin.credentials_file.empty() && d.origin.credentials_file != a.credentials_file) {
    return fail(errc::unauthorized, "credentials_file " + quote_excerpt(d.origin.credentials_file) +
                                        " is not the one datasets.allowed_origins binds to " +
                                        endpoint +
                                        " (the configuration chooses credentials; leave it out)");
  }
  if (!a.credentials_file.empty())
    return s3::load_credentials(credentials_path(o.credentials_dir, a.credentials_file));
  if (a.credentials_env) return s3::load_credentials("");
  return s3::credentials{};
}

// Whether the declaration's origin (an HTTP base, or an S3 endpoint) is allowed; its entry.
result<const allowed_origin*> allowed_entry(const origin_options& o, const std::string& url) {
  auto e = http::parse_endpoint(url);
  if (!e) return fail(errc::invalid_argument, "dataset origin: " + e.error().message);
  const allowed_origin* a = find_allowed(*o.allowed, *e);
  if (a == nullptr) {
    return fail(errc::unauthorized, "dataset origin " + e->scheme + "://" + e->host + ":" +
                                        e->port + " is not in datasets.allowed_origins");
  }
  return a;
}

}  // namespace

result<std::unique_ptr<dataset_origin>> dataset_origin::make(const dataset::declaration& d,
                                                             http::client& http, origin_options o) {
  std::unique_ptr<dataset_origin> out(new dataset_origin(d, http, std::move(o)));
  const origin_options& opts = out->opts_;
  if (d.origin.type != dataset::origin::kind::s3) {
    if (opts.allowed) {
      if (auto a = allowed_entry(opts, d.origin.prefix); !a) return fail(a.error());
    }
    return out;
  }
  s3::config c;
  c.endpoint = d.origin.endpoint.empty() ? "https://s3." + d.origin.region + ".amazonaws.com"
                                         : d.origin.endpoint;
  c.region = d.origin.region;
  c.bucket = d.origin.bucket;
  c.timeouts.connect = opts.connect_timeout;
  c.timeouts.stall = opts.stall_timeout;
  result<s3::credentials> creds;
  if (opts.allowed) {
    auto a = allowed_entry(opts, c.endpoint);
    if (!a) return fail(a.error());
    creds = bound_credentials(d, opts, **a, c.endpoint);
  } else {
    auto file = declared_credentials(d, opts);
    if (!file) return fail(file.error());
    creds = s3::load_credentials(*file);
  }
  if (!creds) return fail(creds.error());
  c.creds = std::move(*creds);
  out->s3_ = std::make_unique<s3::client>(http, std::move(c));
  return out;
}

std::string dataset_origin::describe(const std::string& path) const {
  if (decl_.origin.type == dataset::origin::kind::s3)
    return "s3://" + decl_.origin.bucket + "/" + decl_.origin.prefix + path;
  return decl_.origin.prefix + path;
}

result<std::vector<origin_object>> dataset_origin::list(const std::atomic<bool>& cancel) const {
  auto r = decl_.origin.type == dataset::origin::kind::s3 ? list_s3(cancel) : list_http(cancel);
  if (!r) return r;
  std::sort(r->begin(), r->end(),
            [](const origin_object& a, const origin_object& b) { return a.path < b.path; });
  for (std::size_t i = 1; i < r->size(); ++i) {
    if ((*r)[i].path == (*r)[i - 1].path) {
      return fail(errc::invalid_argument, "origin lists " + describe((*r)[i].path) + " twice");
    }
  }
  return r;
}

result<std::vector<origin_object>> dataset_origin::list_s3(const std::atomic<bool>&) const {
  auto objs = s3_->list(decl_.origin.prefix, opts_.max_files * 2 + 1000);
  if (!objs) return fail(objs.error());
  std::vector<origin_object> out;
  const std::string& prefix = decl_.origin.prefix;
  for (auto& o : *objs) {
    if (o.key.compare(0, prefix.size(), prefix) != 0) {
      return fail(errc::protocol_error,
                  "S3 listed key outside the prefix: " + o.key.substr(0, 200));
    }
    std::string path = o.key.substr(prefix.size());
    // "dir/" objects of size 0 are how consoles create folders: not files.
    if (path.empty() || (path.back() == '/' && o.size == 0)) continue;
    if (!dataset::selected(decl_, path)) continue;
    if (auto s = dataset::check_path(path); !s) {
      return fail(errc::invalid_argument,
                  "origin s3://" + decl_.origin.bucket + "/" + prefix +
                      " has a key that cannot be a dataset path: " + s.error().message);
    }
    if (out.size() >= opts_.max_files) {
      return fail(errc::too_large,
                  "origin selects more than " + std::to_string(opts_.max_files) + " files");
    }
    out.push_back(origin_object{std::move(path), o.size, o.etag});
  }
  return out;
}

result<std::vector<origin_object>> dataset_origin::list_http(
    const std::atomic<bool>& cancel) const {
  std::vector<origin_object> out;
  // Breadth first: (directory path relative to the base, ending in '/' or empty, depth).
  std::deque<std::pair<std::string, std::size_t>> dirs{{"", 0}};
  std::size_t listings = 0;
  while (!dirs.empty()) {
    if (cancel.load()) return fail(errc::cancelled, "listing cancelled");
    auto [dir, depth] = dirs.front();
    dirs.pop_front();
    if (++listings > opts_.max_files)
      return fail(errc::too_large, "origin has more directories than files allowed");
    http::client_request r;
    r.url = decl_.origin.prefix + dataset::url_path_escape(dir);
    r.timeouts.connect = opts_.connect_timeout;
    r.timeouts.stall = opts_.stall_timeout;
    r.headers.emplace_back("Accept", "application/json");
    auto f = http::fetch(http_, std::move(r), 256u << 20);
    if (!f) return fail(f.error().wrap("list " + describe(dir)));
    if (f->status != 200) {
      return fail(f->status == 404 ? errc::not_found : errc::upstream_error,
                  "list " + describe(dir) + ": HTTP " + std::to_string(f->status));
    }
    auto entries = dataset::parse_autoindex(f->body, opts_.max_files);
    if (!entries) return fail(entries.error().wrap("list " + describe(dir)));
    for (auto& e : *entries) {
      std::string path = dir + e.name;
      if (auto s = dataset::check_path(path); !s) {
        return fail(errc::invalid_argument,
                    "origin " + decl_.origin.prefix +
                        " lists a name that cannot be a dataset path: " + s.error().message);
      }
      if (e.directory) {
        if (depth + 1 >= opts_.max_depth)
          return fail(errc::too_large, "origin directories nest deeper than " +
                                           std::to_string(opts_.max_depth) + " at " +
                                           describe(path));
        dirs.emplace_back(path + "/", depth + 1);
        continue;
      }
      if (!dataset::selected(decl_, path)) continue;
      if (out.size() >= opts_.max_files) {
        return fail(errc::too_large,
                    "origin selects more than " + std::to_string(opts_.max_files) + " files");
      }
      out.push_back(origin_object{std::move(path), e.size, ""});
    }
  }
  return out;
}

http::client_request dataset_origin::request_for(const std::string& path, std::uint64_t from,
                                                 std::uint64_t size) const {
  std::optional<std::pair<std::uint64_t, std::uint64_t>> range;
  if (from > 0) range = std::make_pair(from, size - 1);
  http::client_request r;
  if (s3_) {
    r = s3_->get(decl_.origin.prefix + path, range);
  } else {
    r.url = decl_.origin.prefix + dataset::url_path_escape(path);
    if (range)
      r.headers.emplace_back(
          "Range", "bytes=" + std::to_string(range->first) + "-" + std::to_string(range->second));
  }
  r.timeouts.connect = opts_.connect_timeout;
  r.timeouts.stall = opts_.stall_timeout;
  r.resume = true;
  r.max_retries = 3;
  return r;
}

result<fetch_report> dataset_origin::fetch(const origin_object& o, cache::store& store,
                                           const std::string& staging_dir,
                                           const std::optional<digest>& expected,
                                           const std::function<void(std::uint64_t)>& progress,
                                           const std::atomic<bool>& cancel,
                                           staging_budget* budget) const {
  const std::string path = staging_dir + "/" + staging_name(decl_.origin.url, o) + ".part";
  auto r = fetch_staged(o, store, path, expected, progress, cancel, budget);
  if (!r && !resumable_failure(r.error())) ::unlink(path.c_str());
  return r;
}

result<fetch_report> dataset_origin::fetch_staged(
    const origin_object& o, cache::store& store, const std::string& path,
    const std::optional<digest>& expected, const std::function<void(std::uint64_t)>& progress,
    const std::atomic<bool>& cancel, staging_budget* budget) const {
  fetch_report rep;
  const std::string where = describe(o.path);
  auto sf = open_staging(path, o.size, rep);
  if (!sf) return fail(sf.error());
  if (budget != nullptr) {
    if (auto s = budget->reserve(o.size, o.size - sf->have); !s)
      return fail(s.error().wrap("stage " + where));
  }
  struct release_t {
    staging_budget* b;
    std::uint64_t n;
    ~release_t() {
      if (b != nullptr) b->release(n);
    }
  } release{budget, o.size};
  int failures = 0;
  while (sf->have < o.size) {
    if (cancel.load()) return fail(errc::cancelled, "fetch of " + where + " cancelled");
    ++rep.requests;
    attempt a = request_rest(http_, request_for(o.path, sf->have, o.size), where, o.size, *sf, rep,
                             progress, cancel, budget);
    if (a.err && ends_fetch(*a.err)) return fail(*a.err);
    // The connect policy refused a hop (datasets.allowed_origins): final, and nothing of it kept.
    if (!a.res && a.res.error().is(errc::unauthorized)) return fail(a.res.error());
    if (a.res && (a.res->status == 200 || a.res->status == 206) && !a.err) {
      if (sf->have == o.size) break;
      // A short body without a transport error: the object shrank. The message does not say
      // how many bytes came: that would tell what an origin answered.
      return fail(errc::size_mismatch,
                  where + " is shorter than the listing said (it changed at the origin)");
    }
    // A status we refused in on_response ends the request as "aborted": judge by the status.
    const int status = a.res ? a.res->status : a.status;
    if (auto e = refusal(status, where)) return fail(*e);
    if (status == 416) {
      // Our offset is beyond the object: it changed. Start over.
      if (auto s = sf->start_over(); !s) return fail(s.error());
    }
    std::string why = failure_reason(a, status);
    if (++failures > opts_.max_retries) {
      return fail(!a.res ? a.res.error().code : make_error_code(errc::upstream_error),
                  "fetch " + where + ": " + why);
    }
    log::warn("origin fetch failed; resuming", log::kv("object", where), log::kv("bytes", sf->have),
              log::kv("attempt", failures), log::kv("error", why));
    // Back off (bounded), polling for cancellation.
    poll_for(std::chrono::milliseconds(std::min(5000, 200 << std::min(failures, 5))),
             [&] { return cancel.load(); });
  }
  rep.id = sf->hasher->finish();
  if (expected && rep.id != *expected) {
    ::unlink(sf->path.c_str());
    return fail(errc::digest_mismatch,
                where + " now hashes to " + rep.id.str() + ", not " + expected->str());
  }
  sf->fd.reset();
  if (auto s = adopt_staged(store, sf->path, rep.id, where, cancel); !s) return fail(s.error());
  return rep;
}

}  // namespace shoal::proxy

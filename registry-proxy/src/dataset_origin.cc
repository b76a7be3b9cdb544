#include "dataset_origin.h"

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

}  // namespace

std::string staging_name(const std::string& origin_url, const origin_object& o) {
  std::string id = origin_url + "\n" + o.path + "\n" + std::to_string(o.size) + "\n" + o.version;
  return sha256_of(id).hex();
}

result<std::unique_ptr<dataset_origin>> dataset_origin::make(const dataset::declaration& d, http::client& http,
                                                            origin_options o) {
  std::unique_ptr<dataset_origin> out(new dataset_origin(d, http, std::move(o)));
  if (d.origin.type != dataset::origin::kind::s3) return out;
  s3::config c;
  c.endpoint = d.origin.endpoint.empty() ? "https://s3." + d.origin.region + ".amazonaws.com" : d.origin.endpoint;
  c.region = d.origin.region;
  c.bucket = d.origin.bucket;
  c.timeouts.connect = out->opts_.connect_timeout;
  c.timeouts.stall = out->opts_.stall_timeout;
  std::string file;
  if (!d.origin.credentials_file.empty()) {
    // A declaration comes from a client: it may only name a file inside credentials_dir, or it
    // could make registry-proxy send the first line of any file it can read to any endpoint.
    if (out->opts_.credentials_dir.empty()) {
      return fail(errc::config_error, "dataset origin names credentials_file " + d.origin.credentials_file +
                                          " but datasets.credentials_dir is not configured");
    }
    if (auto s = dataset::check_path(d.origin.credentials_file); !s) {
      return fail(errc::invalid_argument, "credentials_file must be a relative name inside datasets.credentials_dir: " +
                                              s.error().message);
    }
    file = trim_slashes(out->opts_.credentials_dir) + "/" + d.origin.credentials_file;
  }
  auto creds = s3::load_credentials(file);
  if (!creds) return fail(creds.error());
  c.creds = std::move(*creds);
  out->s3_ = std::make_unique<s3::client>(http, std::move(c));
  return out;
}

std::string dataset_origin::describe(const std::string& path) const {
  if (decl_.origin.type == dataset::origin::kind::s3) return "s3://" + decl_.origin.bucket + "/" + decl_.origin.prefix + path;
  return decl_.origin.prefix + path;
}

result<std::vector<origin_object>> dataset_origin::list(const std::atomic<bool>& cancel) const {
  auto r = decl_.origin.type == dataset::origin::kind::s3 ? list_s3(cancel) : list_http(cancel);
  if (!r) return r;
  std::sort(r->begin(), r->end(), [](const origin_object& a, const origin_object& b) { return a.path < b.path; });
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
      return fail(errc::protocol_error, "S3 listed key outside the prefix: " + o.key.substr(0, 200));
    }
    std::string path = o.key.substr(prefix.size());
    // "dir/" objects of size 0 are how consoles create folders: not files.
    if (path.empty() || (path.back() == '/' && o.size == 0)) continue;
    if (!dataset::selected(decl_, path)) continue;
    if (auto s = dataset::check_path(path); !s) {
      return fail(errc::invalid_argument, "origin s3://" + decl_.origin.bucket + "/" + prefix +
                                              " has a key that cannot be a dataset path: " + s.error().message);
    }
    if (out.size() >= opts_.max_files) {
      return fail(errc::too_large, "origin selects more than " + std::to_string(opts_.max_files) + " files");
    }
    out.push_back(origin_object{std::move(path), o.size, o.etag});
  }
  return out;
}

result<std::vector<origin_object>> dataset_origin::list_http(const std::atomic<bool>& cancel) const {
  std::vector<origin_object> out;
  // Breadth first: (directory path relative to the base, ending in '/' or empty, depth).
  std::deque<std::pair<std::string, std::size_t>> dirs{{"", 0}};
  std::size_t listings = 0;
  while (!dirs.empty()) {
    if (cancel.load()) return fail(errc::cancelled, "listing cancelled");
    auto [dir, depth] = dirs.front();
    dirs.pop_front();
    if (++listings > opts_.max_files) return fail(errc::too_large, "origin has more directories than files allowed");
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
        return fail(errc::invalid_argument, "origin " + decl_.origin.prefix +
                                                " lists a name that cannot be a dataset path: " + s.error().message);
      }
      if (e.directory) {
        if (depth + 1 >= opts_.max_depth) return fail(errc::too_large, "origin directories nest deeper than " +
                                                                          std::to_string(opts_.max_depth) + " at " + describe(path));
        dirs.emplace_back(path + "/", depth + 1);
        continue;
      }
      if (!dataset::selected(decl_, path)) continue;
      if (out.size() >= opts_.max_files) {
        return fail(errc::too_large, "origin selects more than " + std::to_string(opts_.max_files) + " files");
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
    if (range) r.headers.emplace_back("Range", "bytes=" + std::to_string(range->first) + "-" + std::to_string(range->second));
  }
  r.timeouts.connect = opts_.connect_timeout;
  r.timeouts.stall = opts_.stall_timeout;
  r.resume = true;
  r.max_retries = 3;
  return r;
}

result<fetch_report> dataset_origin::fetch(const origin_object& o, cache::store& store, const std::string& staging_dir,
                                           const std::optional<digest>& expected,
                                           const std::function<void(std::uint64_t)>& progress,
                                           const std::atomic<bool>& cancel) const {
  fetch_report rep;
  const std::string where = describe(o.path);
  std::string staging = staging_dir + "/" + staging_name(decl_.origin.url, o) + ".part";
  unique_fd fd(::open(staging.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return fail_errno(errno, "open " + staging);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno(errno, "stat " + staging);
  std::uint64_t have = static_cast<std::uint64_t>(st.st_size);
  auto hasher = std::make_unique<sha256_hasher>();
  if (have > o.size) {
    if (::ftruncate(fd.get(), 0) != 0) return fail_errno(errno, "truncate " + staging);
    have = 0;
  }
  if (have > 0) {
    if (auto s = hash_prefix(fd.get(), have, *hasher); !s) {
      if (::ftruncate(fd.get(), 0) != 0) return fail_errno(errno, "truncate " + staging);
      hasher = std::make_unique<sha256_hasher>();
      have = 0;
    } else {
      rep.resumed_bytes = have;
    }
  }
  int failures = 0;
  while (have < o.size) {
    if (cancel.load()) return fail(errc::cancelled, "fetch of " + where + " cancelled");
    ++rep.requests;
    struct state_t {
      int status = 0;
      bool restart = false;
      std::optional<error> err;
    };
    auto st_ = std::make_shared<state_t>();
    std::promise<result<http::completion>> done;
    auto fut = done.get_future();
    const std::uint64_t from = have;
    http::callbacks cb;
    cb.on_response = [&, st_, from](const http::response_head& h) {
      st_->status = h.status;
      if (h.status == 206) {
        auto cr = h.header("Content-Range");
        auto start = cr ? range_start(*cr) : std::nullopt;
        if (!start || *start != from) {
          st_->err = error{errc::protocol_error, where + ": the origin answered another range than asked"};
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
        if (::ftruncate(fd.get(), 0) != 0) {
          st_->err = errno_error(errno, "truncate " + staging);
          return false;
        }
        hasher = std::make_unique<sha256_hasher>();
        rep.resumed_bytes = 0;
        have = 0;
      }
      if (have + chunk.size() > o.size) {
        st_->err = error{errc::size_mismatch, where + " is longer than the " + std::to_string(o.size) +
                                                   " bytes listed (it changed at the origin)"};
        return false;
      }
      std::size_t off = 0;
      while (off < chunk.size()) {
        ssize_t n = ::pwrite(fd.get(), chunk.data() + off, chunk.size() - off, static_cast<off_t>(have + off));
        if (n < 0) {
          if (errno == EINTR) continue;
          st_->err = errno_error(errno, "write " + staging);
          return false;
        }
        off += static_cast<std::size_t>(n);
      }
      hasher->update(chunk.data(), chunk.size());
      have += chunk.size();
      rep.origin_bytes += chunk.size();
      if (progress) progress(chunk.size());
      return true;
    };
    cb.on_complete = [&done](result<http::completion> r) { done.set_value(std::move(r)); };
    http_.submit(request_for(o.path, from, o.size), std::move(cb));
    auto res = fut.get();
    if (st_->err) {
      if (st_->err->is(errc::size_mismatch) || st_->err->is(errc::no_space)) return fail(*st_->err);
      if (st_->err->code.category() == std::system_category() && st_->err->code.value() == ENOSPC) return fail(*st_->err);
    }
    if (res && (res->status == 200 || res->status == 206) && !st_->err) {
      if (have == o.size) break;
      // A short body without a transport error: the object shrank.
      return fail(errc::size_mismatch, where + " has " + std::to_string(have) + " bytes, the listing said " +
                                           std::to_string(o.size) + " (it changed at the origin)");
    }
    // A status we refused in on_response ends the request as "aborted": judge by the status.
    const int status = res ? res->status : st_->status;
    if (status == 404 || status == 410) {
      return fail(errc::not_found, where + ": the origin no longer has it (HTTP " + std::to_string(status) + ")");
    }
    if (status == 401 || status == 403) {
      return fail(errc::unauthorized, where + ": the origin refused access (HTTP " + std::to_string(status) + ")");
    }
    if (status == 416) {
      // Our offset is beyond the object: it changed. Start over.
      if (::ftruncate(fd.get(), 0) != 0) return fail_errno(errno, "truncate " + staging);
      hasher = std::make_unique<sha256_hasher>();
      have = 0;
    }
    std::string why = st_->err                         ? st_->err->message
                      : status != 0 && status != 200 && status != 206 ? "HTTP " + std::to_string(status)
                      : !res                           ? res.error().message
                                                       : "HTTP " + std::to_string(status);
    if (++failures > opts_.max_retries) {
      return fail(!res ? res.error().code : make_error_code(errc::upstream_error),
                  "fetch " + where + " (" + std::to_string(have) + " of " + std::to_string(o.size) +
                      " bytes): " + why);
    }
    log::warn("origin fetch failed; resuming", log::kv("object", where), log::kv("bytes", have),
              log::kv("attempt", failures), log::kv("error", why));
    // Back off (bounded), polling for cancellation.
    auto wait = std::chrono::milliseconds(std::min(5000, 200 << std::min(failures, 5)));
    for (auto t = std::chrono::milliseconds(0); t < wait && !cancel.load(); t += std::chrono::milliseconds(50)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  rep.id = hasher->finish();
  if (expected && rep.id != *expected) {
    ::unlink(staging.c_str());
    return fail(errc::digest_mismatch, where + " now hashes to " + rep.id.str() + ", not " + expected->str());
  }
  fd.reset();
  auto s = store.adopt_file(staging, rep.id, cache::object_kind::dataset_file);
  if (!s && s.error().is(errc::busy)) {
    // Someone else is writing the same bytes (another path with the same content): wait for it.
    for (int i = 0; i < 600 && !store.contains(rep.id) && !cancel.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (store.contains(rep.id)) s = {};
  }
  if (!s && !s.error().is(errc::already_exists)) {
    if (s.error().is(errc::digest_mismatch)) ::unlink(staging.c_str());
    return fail(s.error().wrap("cache " + where));
  }
  ::unlink(staging.c_str());  // no-op when adopted (renamed away)
  return rep;
}

}  // namespace shoal::proxy

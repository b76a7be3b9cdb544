// store (thin forwarding to detail::core), object_reader, options validation and the small
// value-type helpers.

#include "cache/store.h"

#include "common/sha256.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core.h"

namespace shoal::cache {

// ---------------------------------------------------------------------------------------------
// Value types

std::string_view to_string(object_kind k) noexcept {
  switch (k) {
    case object_kind::blob:
      return "blob";
    case object_kind::dataset_file:
      return "dataset_file";
    case object_kind::manifest:
      return "manifest";
    case object_kind::metainfo:
      return "metainfo";
  }
  return "unknown";
}

std::optional<object_kind> parse_object_kind(std::string_view s) noexcept {
  for (std::size_t i = 0; i < object_kind_count; ++i) {
    auto k = static_cast<object_kind>(i);
    if (to_string(k) == s) return k;
  }
  return std::nullopt;
}

std::string_view to_string(event_type t) noexcept {
  switch (t) {
    case event_type::committed:
      return "committed";
    case event_type::evicted:
      return "evicted";
    case event_type::quarantined:
      return "quarantined";
    case event_type::removed:
      return "removed";
  }
  return "unknown";
}

std::string_view to_string(evict_reason r) noexcept {
  switch (r) {
    case evict_reason::none:
      return "none";
    case evict_reason::watermark:
      return "watermark";
    case evict_reason::idle_ttl:
      return "idle_ttl";
    case evict_reason::no_space:
      return "no_space";
    case evict_reason::requested:
      return "requested";
  }
  return "unknown";
}

status options::validate() const {
  auto bad = [](std::string field, std::string why) {
    return fail(errc::config_error, "cache." + field + ": " + why);
  };
  if (root.empty()) return bad("root", "must be set");
  if (quota_bytes == 0 && !(fs_share > 0.0 && fs_share <= 1.0)) {
    return bad("fs_share", "must be in (0, 1], got " + std::to_string(fs_share));
  }
  if (!(high_watermark > 0.0 && high_watermark <= 1.0)) {
    return bad("high_watermark", "must be in (0, 1], got " + std::to_string(high_watermark));
  }
  if (!(low_watermark > 0.0 && low_watermark < high_watermark)) {
    return bad("low_watermark",
               "must be in (0, high_watermark), got " + std::to_string(low_watermark));
  }
  if (idle_ttl.count() < 0) return bad("idle_ttl", "must not be negative");
  if (scrub_interval.count() <= 0) return bad("scrub_interval", "must be positive");
  if (access_flush_interval.count() <= 0) return bad("access_flush_interval", "must be positive");
  if (maintenance_interval.count() <= 0) return bad("maintenance_interval", "must be positive");
  if (reconcile_threads == 0) return bad("reconcile_threads", "must be at least 1");
  if (write_threads > 64) return bad("write_threads", "at most 64");
  return {};
}

// ---------------------------------------------------------------------------------------------
// object_reader

object_reader::object_reader(object_reader&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), size_(o.size_), id_(o.id_), kind_(o.kind_) {}

object_reader& object_reader::operator=(object_reader&& o) noexcept {
  if (this != &o) {
    detail::close_quietly(fd_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    id_ = o.id_;
    kind_ = o.kind_;
  }
  return *this;
}

object_reader::~object_reader() { detail::close_quietly(fd_); }

int object_reader::release() noexcept { return std::exchange(fd_, -1); }

status object_reader::check_range(std::uint64_t offset, std::uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return fail(errc::range_not_satisfiable,
                "range " + std::to_string(offset) + "+" + std::to_string(length) + " outside " +
                    id_.short_str() + " of " + std::to_string(size_) + " bytes");
  }
  return {};
}

result<std::size_t> object_reader::pread(std::uint64_t offset, std::span<std::byte> out) const {
  if (fd_ < 0) return fail(errc::invalid_argument, "read of a released object_reader");
  if (offset > size_) return std::unexpected(check_range(offset, 0).error());
  std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), size_ - offset));
  std::size_t done = 0;
  while (done < want) {
    ssize_t n = ::pread(fd_, out.data() + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "pread " + id_.short_str());
    }
    if (n == 0) {
      return fail(errc::io_error, "pread " + id_.short_str() + ": file shorter than indexed");
    }
    done += static_cast<std::size_t>(n);
  }
  return done;
}

result<std::string> object_reader::read(std::uint64_t offset, std::uint64_t length) const {
  if (auto st = check_range(offset, length); !st) return std::unexpected(st.error());
  std::string s(static_cast<std::size_t>(length), '\0');
  auto n = pread(offset, std::span<std::byte>(reinterpret_cast<std::byte*>(s.data()), s.size()));
  if (!n) return std::unexpected(n.error());
  return s;
}

// ---------------------------------------------------------------------------------------------
// subscription

subscription& subscription::operator=(subscription&& o) noexcept {
  if (this != &o) {
    reset();
    cancel_ = std::move(o.cancel_);
    o.cancel_ = nullptr;
  }
  return *this;
}

void subscription::reset() {
  if (cancel_) {
    auto c = std::move(cancel_);
    cancel_ = nullptr;
    c();
  }
}

// ---------------------------------------------------------------------------------------------
// store

result<std::unique_ptr<store>> store::open(const options& opts) {
  auto c = detail::core::open(opts);
  if (!c) return std::unexpected(c.error());
  return std::unique_ptr<store>(new store(std::move(*c)));
}

store::~store() {
  if (core_) core_->stop();
}

void store::start_background() { core_->start_background(); }
void store::stop() { core_->stop(); }

result<write_ticket> store::begin_write(const digest& id, std::optional<std::uint64_t> expected,
                                        object_kind kind) {
  return core_->begin_write(id, expected, kind);
}

result<write_ticket> store::begin_write(std::string_view id, std::optional<std::uint64_t> expected,
                                        object_kind kind) {
  auto d = digest::parse(id);
  if (!d) return std::unexpected(d.error().wrap("begin_write"));
  return core_->begin_write(*d, expected, kind);
}

status store::adopt_file(const std::string& path, const digest& id, object_kind kind,
                         const content_proof* proof) {
  return core_->adopt_file(path, id, kind, proof);
}

result<adopt_outcome> store::adopt_staged(const std::string& path, const digest& id,
                                          object_kind kind, const content_proof* proof) {
  return core_->adopt_staged(path, id, kind, proof);
}

std::shared_ptr<inflight_object> store::find_inflight(const digest& id) const {
  return core_->find_inflight(id);
}

result<object_reader> store::open_read(const digest& id) { return core_->open_read(id); }

result<object_reader> store::open_read(std::string_view id) {
  auto d = digest::parse(id);
  if (!d) return std::unexpected(d.error().wrap("open_read"));
  return core_->open_read(*d);
}

std::optional<object_info> store::stat(const digest& id) const { return core_->stat(id); }

result<object_info> store::stat(std::string_view id) const {
  auto d = digest::parse(id);
  if (!d) return std::unexpected(d.error().wrap("stat"));
  auto info = core_->stat(*d);
  if (!info) return fail(errc::not_found, "object " + d->str() + " is not in the cache");
  return std::move(*info);
}

bool store::contains(const digest& id) const { return core_->contains(id); }
std::vector<object_info> store::list() const { return core_->list(); }
std::vector<held_info> store::list_held() const { return core_->list_held(); }
std::uint64_t store::held_generation() const noexcept { return core_->held_generation(); }
std::string store::object_path(const digest& id) const { return core_->dirs().object_path(id); }
std::string store::shard_dir(const digest& id) const { return core_->dirs().shard_path(id); }
std::string store::staging_dir() const { return core_->dirs().tmp_dir(); }
std::string store::pack_dir() const { return core_->dirs().pack_dir(); }
std::string store::pack_member_path(const digest& id) {
  return detail::layout::relative_object_path(id);
}

status store::check_same_filesystem(const std::string& path) const {
  struct ::stat a {
  }, b{};
  const std::string& objects = core_->dirs().pack_dir();
  if (::stat(path.c_str(), &a) != 0 || ::stat(objects.c_str(), &b) != 0 || a.st_dev == b.st_dev)
    return {};
  return fail(errc::config_error, path + " is not on the cache's filesystem (" + objects + ")");
}

status store::pin(const digest& id, std::string_view owner, std::optional<time_point> expiry) {
  return core_->pin(id, owner, expiry);
}
status store::unpin(const digest& id, std::string_view owner) { return core_->unpin(id, owner); }
status store::renew_pin(const digest& id, std::string_view owner,
                        std::optional<time_point> expiry) {
  return core_->renew_pin(id, owner, expiry);
}
status store::add_label(const digest& id, std::string_view label) {
  return core_->add_label(id, label);
}
status store::remove_label(const digest& id, std::string_view label) {
  return core_->remove_label(id, label);
}

status store::remove(const digest& id) { return core_->remove(id); }
status store::link_sealed(const digest& id, const std::string& dst) {
  return core_->link_sealed(id, dst);
}
status store::unlink_sealed(const std::string& path, const digest& id) {
  return core_->unlink_sealed(path, id);
}
std::uint64_t store::evict_to(std::uint64_t target) {
  return core_->evict_to(target, evict_reason::requested);
}
void store::run_maintenance() { core_->run_maintenance(true); }
void store::flush_access() { core_->flush_access(); }
scrub_report store::scrub_once(std::uint64_t max_bytes, bool throttle) {
  return core_->scrub(max_bytes, throttle, INT64_MAX);
}

status store::verify(const digest& id) {
  auto rd = core_->open_read(id);
  if (!rd) return fail(rd.error());
  auto got = sha256_fd(rd->fd(), 0, rd->size());
  if (!got) return fail(got.error().wrap("verify " + id.short_str()));
  if (*got == id) return {};
  core_->quarantine(id, rd->fd());
  return fail(errc::digest_mismatch,
              "object " + id.str() + " hashes to " + got->str() + "; quarantined");
}

subscription store::on_event(std::function<void(const event&)> cb) {
  return core_->on_event(std::move(cb));
}
stats store::get_stats() const { return core_->get_stats(); }
const reconcile_report& store::last_reconcile() const noexcept { return core_->last_reconcile(); }
std::uint64_t store::capacity_bytes() const noexcept { return core_->capacity(); }
std::uint64_t store::usage_bytes() const noexcept { return core_->usage(); }
std::uint64_t store::high_watermark_bytes() const noexcept { return core_->high_bytes(); }

}  // namespace shoal::cache

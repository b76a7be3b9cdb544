#include "prewarm.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/oci.h"
#include "common/platform.h"
#include "common/origin_protocol.h"
#include "common/thread_name.h"
#include "datasets.h"
#include "proxy_link.h"

namespace shoal::peerd {

namespace {}  // namespace

prewarm_executor::prewarm_executor(deps d, options o)
    : d_(d), opts_(o), pool_(std::max<std::size_t>(1, o.parallel), "prewarm-step") {}

prewarm_executor::~prewarm_executor() {
  request_stop();
  if (thread_.joinable()) thread_.join();
  pool_.join();
}

void prewarm_executor::start() {
  thread_ = std::thread([this] {
    name_this_thread("prewarm");
    run();
  });
}

void prewarm_executor::request_stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void prewarm_executor::on_change(std::function<void()> cb) {
  std::lock_guard lk(mu_);
  on_change_ = std::move(cb);
}

void prewarm_executor::submit(const std::vector<heartbeat::prewarm_order>& orders) {
  std::size_t added = 0;
  {
    std::lock_guard lk(mu_);
    for (const auto& o : orders) {
      if (jobs_.count(o.id)) continue;
      auto j = std::make_shared<job>();
      j->order = o;
      if (jobs_.size() >= opts_.max_orders) {
        j->state = heartbeat::order_state::failed;
        j->error =
            "too many prewarm orders on this node (" + std::to_string(opts_.max_orders) + ")";
        j->ended = std::chrono::steady_clock::now();
      } else {
        queue_.push_back(j);
        ++added;
      }
      jobs_[o.id] = j;
      log::info("prewarm order received", log::kv("id", o.id), log::kv("image", o.image),
                log::kv("dataset", o.dataset), log::kv("objects", o.objects.size()));
    }
  }
  if (added) cv_.notify_all();
}

std::uint64_t prewarm_executor::bytes_done(const heartbeat::prewarm_order& o) const {
  std::uint64_t done = 0;
  for (const auto& ob : o.objects) {
    if (d_.store.contains(ob.id)) {
      done += ob.size;
    } else if (auto dl = d_.swarm.find(ob.id)) {
      std::uint64_t piece = dl->meta().piece_size;
      done +=
          std::min<std::uint64_t>(ob.size, static_cast<std::uint64_t>(dl->pieces_done()) * piece);
    }
  }
  return done;
}

std::vector<heartbeat::order_report> prewarm_executor::reports() {
  std::vector<std::pair<heartbeat::order_report, heartbeat::prewarm_order>> snap;
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(mu_);
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      auto& j = *it->second;
      bool ended =
          j.state == heartbeat::order_state::done || j.state == heartbeat::order_state::failed;
      if (ended && now - j.ended > opts_.keep) {
        it = jobs_.erase(it);
        continue;
      }
      heartbeat::order_report r;
      r.id = j.order.id;
      r.state = j.state;
      r.error = j.error.substr(0, 4000);
      snap.emplace_back(std::move(r), j.order);
      ++it;
    }
  }
  std::vector<heartbeat::order_report> out;
  out.reserve(snap.size());
  for (auto& [r, o] : snap) {
    for (const auto& ob : o.objects) r.bytes_total += ob.size;
    r.bytes_done = r.state == heartbeat::order_state::done ? r.bytes_total : bytes_done(o);
    out.push_back(std::move(r));
  }
  return out;
}

void prewarm_executor::run() {
  for (;;) {
    std::shared_ptr<job> j;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_.load() || !queue_.empty(); });
      if (stop_.load()) return;
      j = queue_.front();
      queue_.pop_front();
      j->state = heartbeat::order_state::running;
    }
    execute(j);
    std::function<void()> cb;
    {
      std::lock_guard lk(mu_);
      j->ended = std::chrono::steady_clock::now();
      cb = on_change_;
    }
    log::info("prewarm order ended", log::kv("id", j->order.id),
              log::kv("state", heartbeat::to_string(j->state)), log::kv("error", j->error));
    if (cb) cb();
  }
}

void prewarm_executor::execute(const std::shared_ptr<job>& j) {
  auto failed = [&](std::string why) {
    std::lock_guard lk(mu_);
    j->state = heartbeat::order_state::failed;
    j->error = std::move(why);
  };
  heartbeat::prewarm_order o;
  {
    std::lock_guard lk(mu_);
    o = j->order;
  }
  if (!o.dataset.empty() || !o.checkpoint.empty()) {
    // A checkpoint order (a standby kept current) is a restore of every rank's files.
    bool ckpt = !o.checkpoint.empty();
    auto* mgr = ckpt ? d_.checkpoints : d_.datasets;
    const auto& ref = ckpt ? o.checkpoint : o.dataset;
    if (!mgr)
      return failed((ckpt ? "checkpoint " : "dataset ") + ref + ": " +
                    (ckpt ? "checkpoints" : "datasets") + " are disabled on this node");
    std::optional<cache::time_point> until;
    if (o.pin_seconds > 0) until = cache::clock::now() + std::chrono::seconds(o.pin_seconds);
    // The prefetch pins every object for the order (owner prewarm:<id>, bounded by
    // datasets.pin_ttl_max) and makes the view, which lasts datasets.pin_ttl or as long as that
    // pin; a repeated prewarm renews it. pin_seconds 0: the view's own pin only.
    auto st =
        mgr->prefetch_and_wait(ref, o.pin_seconds > 0 ? "prewarm:" + o.id : "", until, nullptr);
    if (!st) return failed(st.error().message);
    std::lock_guard lk(mu_);
    j->state = heartbeat::order_state::done;
    return;
  }
  auto ref = oci::parse_image_ref(o.image);
  if (!ref) return failed(ref.error().message);
  if (o.registry.empty()) o.registry = ref->registry;
  if (o.repository.empty()) o.repository = ref->repository;
  if (o.objects.empty()) {
    std::string platform = o.platform;
    if (platform.empty()) {
      auto it = d_.cfg.node.labels.find("platform");
      platform = it != d_.cfg.node.labels.end() ? it->second : "linux/amd64";
    }
    auto objs = resolve_image(d_.http, d_.proxy, d_.cfg.upstream, o.image, platform,
                              std::chrono::duration_cast<std::chrono::milliseconds>(
                                  d_.cfg.upstream.request_timeout.get()));
    if (!objs) return failed(objs.error().message);
    o.objects = std::move(*objs);
    std::lock_guard lk(mu_);
    j->order.objects = o.objects;
  }
  if (o.pin_seconds > 0) {
    // Bounded like a dataset's pins (datasets.pin_ttl_max): an order cannot pin for a year.
    auto until =
        cache::clock::now() +
        std::min<cache::clock::duration>(
            std::chrono::seconds(o.pin_seconds),
            std::chrono::duration_cast<cache::clock::duration>(d_.cfg.datasets.pin_ttl_max.get()));
    for (const auto& ob : o.objects) {
      if (auto s = d_.store.pin(ob.id, "prewarm:" + o.id, until); !s) {
        log::warn("prewarm pin failed", log::kv("digest", ob.id.str()),
                  log::kv("error", s.error().message));
      }
    }
  }
  // Fetch what is missing, `parallel` objects at a time.
  std::mutex mu;
  std::condition_variable cv;
  std::size_t pending = 0;
  std::string first_error;
  for (const auto& ob : o.objects) {
    if (d_.store.contains(ob.id)) continue;
    {
      std::lock_guard lk(mu);
      ++pending;
    }
    boost::asio::post(pool_, [&, d = ob.id] {
      status st = stop_.load() ? status(fail(errc::cancelled, "peerd is shutting down"))
                               : d_.fetch.ensure({o.registry, o.repository}, d, "");
      std::lock_guard lk(mu);
      if (!st && first_error.empty()) first_error = d.str() + ": " + st.error().message;
      --pending;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return pending == 0; });
  }
  if (!first_error.empty()) return failed(first_error);
  for (const auto& ob : o.objects) {
    if (!d_.store.contains(ob.id))
      return failed(ob.id.str() + " is not in the cache after its fetch");
  }
  std::lock_guard lk(mu_);
  j->state = heartbeat::order_state::done;
}

result<std::vector<heartbeat::order_object>> prewarm_executor::resolve_image(
    http::client& c, proxy_link* link, const upstream_config& up, const std::string& image,
    const std::string& platform, std::chrono::milliseconds timeout) {
  auto ref = oci::parse_image_ref(image);
  if (!ref) return fail(ref.error());
  auto get = [&](const std::string& reference) -> result<nlohmann::json> {
    http::client_request r;
    r.url = origin::manifest_target({ref->registry, ref->repository}, reference);
    r.headers.emplace_back("Accept", std::string(oci::media::accept_all));
    r.timeouts.connect = std::chrono::milliseconds(3000);
    r.timeouts.stall = timeout;
    auto f = proxy_call(link, up, c, std::move(r), 8u << 20);
    if (!f) return fail(f.error().wrap("manifest " + reference));
    if (f->status != 200)
      return fail(errc::upstream_error,
                  "manifest " + reference + ": HTTP " + std::to_string(f->status));
    auto j = nlohmann::json::parse(f->body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return fail(errc::protocol_error, "manifest " + reference + " is not JSON");
    return j;
  };
  auto top = get(ref->dig ? ref->dig->str() : ref->tag);
  if (!top) return fail(top.error());
  nlohmann::json m = *top;
  if (m.contains("manifests")) {
    const std::string chosen = oci::index_manifest_for(m, platform);
    if (chosen.empty()) return fail(errc::not_found, image + " has no image for " + platform);
    auto sub = get(chosen);
    if (!sub) return fail(sub.error());
    m = *sub;
  }
  std::vector<heartbeat::order_object> out;
  auto add = [&](const nlohmann::json& desc) -> status {
    if (!desc.is_object() || !desc.contains("digest") || !desc["digest"].is_string() ||
        !desc.contains("size") || !desc["size"].is_number_unsigned()) {
      return fail(errc::protocol_error, "manifest of " + image + " has a malformed descriptor");
    }
    auto d = digest::parse(desc["digest"].get<std::string>());
    if (!d) return fail(d.error());
    out.push_back({*d, desc["size"].get<std::uint64_t>()});
    return {};
  };
  if (!m.contains("config"))
    return fail(errc::protocol_error, "manifest of " + image + " has no config");
  if (auto s = add(m["config"]); !s) return fail(s.error());
  if (m.contains("layers") && m["layers"].is_array()) {
    for (const auto& l : m["layers"]) {
      if (auto s = add(l); !s) return fail(s.error());
    }
  }
  return out;
}

}  // namespace shoal::peerd

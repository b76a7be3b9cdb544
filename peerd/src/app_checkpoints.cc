// peerd's checkpoints (app.h): the publisher, the restores and the API's bearer token.
#include <openssl/crypto.h>

#include <boost/asio/post.hpp>

#include <filesystem>

#include "scheduler_link.h"
#include "checkpoints.h"
#include "common/checkpoint.h"
#include "common/file.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/sha256.h"
#include "common/text.h"
#include "datasets.h"
#include "peerd/app.h"
#include "peerd/fetcher.h"

namespace shoal::peerd {

status app::init_checkpoints() {
  const auto& cc = cfg_.checkpoints;
  if (!cc.enabled) return {};
  if (!cfg_.datasets.enabled) {
    log::warn(
        "checkpoints.enabled needs datasets.enabled (they share the group engine): "
        "checkpoints are off");
    return {};
  }
  auto base = std::filesystem::path(cfg_.cache.dir).parent_path() / "checkpoints";
  std::string dir = cc.dir.empty() ? base.string() : cc.dir;
  if (!cc.token_file.empty()) {
    auto t = read_file(cc.token_file);
    if (!t)
      return fail(errc::config_error,
                  "checkpoints.token_file " + cc.token_file + " cannot be read");
    auto token = trim(t->substr(0, t->find('\n')));  // the first line, as shoalctl sends it
    if (token.size() < 16)
      return fail(errc::config_error,
                  "checkpoints.token_file " + cc.token_file + " holds fewer than 16 characters");
    checkpoint_token_ = sha256_of(token);
  } else {
    log::warn("checkpoints.token_file is not set: checkpoint publish, restore and rm are refused");
  }
  dataset_manager::options o;
  o.views_dir = cc.views_dir.empty() ? (base / "views").string() : cc.views_dir;
  o.dir = dir + "/restores";
  o.parallel_groups = cc.parallel_groups;
  o.resolve_wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.datasets.resolve_wait.get());
  o.max_manifest = static_cast<std::size_t>(cfg_.datasets.max_manifest.bytes());
  o.pin_ttl = std::chrono::duration_cast<std::chrono::seconds>(cc.view_ttl.get());
  o.pin_ttl_max = std::max(
      o.pin_ttl, std::chrono::duration_cast<std::chrono::seconds>(cfg_.datasets.pin_ttl_max.get()));
  o.expiry_interval = std::chrono::duration_cast<std::chrono::milliseconds>(
      cfg_.datasets.expiry_check_interval.get());
  o.checkpoints = true;
  o.keep_last = static_cast<std::size_t>(cc.keep_last);
  restores_ = std::make_unique<dataset_manager>(
      dataset_manager::deps{cfg_, *store_, *fetcher_, *http_client_, pool_, scheduler_.get()},
      std::move(o));
  if (auto s = restores_->start(); !s) return fail(s.error().wrap("checkpoints"));
  checkpoint_publisher::options po;
  po.dir = dir;
  po.publish_root = cc.publish_root.empty() ? (base / "incoming").string() : cc.publish_root;
  po.keep_last = static_cast<std::size_t>(cc.keep_last);
  po.hash_threads = cc.hash_threads;
  publisher_ = std::make_unique<checkpoint_publisher>(
      checkpoint_publisher::deps{cfg_, *store_, *fetcher_, *http_client_, reg_, scheduler_.get()},
      std::move(po));
  if (auto s = publisher_->start(); !s) return fail(s.error().wrap("checkpoints"));
  return {};
}

// Publish, restore and rm need the bearer token; listing and status do not (loopback only).
bool app::handle_checkpoints(const http::request& req, const http::responder& resp) {
  if (!origin::has_prefix(req.path, checkpoint::paths::node)) return false;
  bool mutating = req.method != http::verb::get && req.method != http::verb::head;
  if (mutating) {
    if (!checkpoint_token_) {
      resp.send(origin::plain_error(
          403,
          "checkpoint publish, restore and rm are refused: checkpoints.token_file is not "
          "set in peerd's config"));
      return true;
    }
    std::string_view auth = req.header("Authorization");
    constexpr std::string_view bearer = "Bearer ";
    bool ok = false;
    if (auth.size() > bearer.size() && auth.substr(0, bearer.size()) == bearer) {
      auto presented = sha256_of(trim(auth.substr(bearer.size())));
      ok = CRYPTO_memcmp(presented.bytes().data(), checkpoint_token_->bytes().data(),
                         presented.bytes().size()) == 0;
    }
    if (!ok) {
      resp.send(origin::plain_error(
          401,
          "checkpoint publish, restore and rm need Authorization: Bearer <the token in "
          "checkpoints.token_file>"));
      return true;
    }
  }
  if (publisher_->handle(req, resp)) return true;
  // rm on the writer: its published pins go too; the view (if restored here) through restores_.
  std::string_view rest = std::string_view(req.path).substr(checkpoint::paths::node.size());
  if (req.method == http::verb::delete_ && rest.size() > 1) {
    std::string key(rest.substr(1));
    if (auto r = checkpoint::parse_ref(key, false); r && publisher_->status_json(key)) {
      boost::asio::post(pool_, [this, key, resp] {
        auto s = publisher_->unpin(key);
        if (!s) {
          resp.send(origin::plain_error(s.error().is(errc::busy) ? 409 : 500, s.error().message));
          return;
        }
        // Restored here as well: that view goes too (its own answer then).
        if (restores_->has(key)) return restores_->remove(key, resp);
        resp.send(http::response::json(
            200, "{\"checkpoint\":\"" + key + "\",\"unpinned\":\"published\"}"));
      });
      return true;
    }
  }
  return restores_->handle(req, resp);
}

}  // namespace shoal::peerd

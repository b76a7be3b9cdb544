// `shoalctl checkpoint ...` (shoalctl_checkpoint.h).
#include "shoalctl_checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/checkpoint.h"
#include "common/text.h"
#include "common/json_text.h"

namespace shoal::tools::ctl {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string publish_line(const json& j) {
  double done = num_of(j, "bytes_read"), total = num_of(j, "bytes");
  double frac = total > 0 ? done / total : 0.0;
  std::optional<double> eta;
  if (j.contains("eta_seconds") && j["eta_seconds"].is_number()) eta = num_of(j, "eta_seconds");
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s %5.1f%%  %s / %s read  %s/s  ETA %s  files %.0f/%.0f  %s",
                bar(frac).c_str(), 100.0 * frac, human(done).c_str(), human(total).c_str(),
                human(num_of(j, "rate")).c_str(), eta_text(eta).c_str(), num_of(j, "files_done"),
                num_of(j, "files"), j.value("state", "").c_str());
  return buf;
}

// The bearer token peerd wants for publish, restore and rm; empty (after saying why) when the
// token file cannot be read.
std::vector<std::pair<std::string, std::string>> auth_header(const checkpoint_options& o) {
  auto t = read_token(o.token_file);
  if (!t) {
    std::fprintf(stderr, "shoalctl: the checkpoint token (--checkpoint-token-file): %s\n",
                 t.error().message.c_str());
    return {};
  }
  return {{"Authorization", "Bearer " + *t}};
}

int cmd_publish(const context& cx, const checkpoint_options& o) {
  auto headers = auth_header(o);
  if (headers.empty()) return 2;
  std::error_code ec;
  json body = {{"job", o.job}, {"step", o.step}, {"dir", fs::absolute(o.dir, ec).string()}};
  if (!o.ranks_file.empty()) {
    std::ifstream in(o.ranks_file);
    std::stringstream ss;
    ss << in.rdbuf();
    auto r = json::parse(ss.str(), nullptr, false);
    if (!in || !r.is_object()) {
      std::fprintf(stderr, "shoalctl: --ranks-file %s is not a JSON object {\"path\": [ranks]}\n",
                   o.ranks_file.c_str());
      return 2;
    }
    body["ranks"] = std::move(r);
  }
  std::string key = checkpoint::key(o.job, o.step);
  auto r = request(cx, "POST", cx.peerd + std::string(checkpoint::paths::node_publish),
                   json_text(body), std::chrono::seconds(30), headers);
  if (!r || r->status != 202) return report("checkpoint publish " + key, r);
  std::string url = cx.peerd + std::string(checkpoint::paths::node_published) + "/" + key;
  std::optional<json> j = json::parse(r->body, nullptr, false);
  if (o.wait)
    j = follow(cx, url, o.timeout, publish_line, {"registered", "refused", "failed", "unpinned"},
               key, std::chrono::milliseconds(300));
  if (!j) return 1;
  std::string st = j->value("state", "");
  // refused: this publish was refused; what was registered before under the step stands.
  bool bad = st == "failed" || st == "refused";
  if (print_document(*j, cx.out)) return bad ? 1 : 0;
  std::printf("%s %s: %.0f files, %s (%s new to this node) in %.1fs, read in %.1fs\n", key.c_str(),
              st.c_str(), num_of(*j, "files"), human(num_of(*j, "bytes")).c_str(),
              human(num_of(*j, "bytes_stored")).c_str(), num_of(*j, "seconds"),
              num_of(*j, "read_seconds"));
  if (!j->value("error", "").empty()) std::printf("  error: %s\n", j->value("error", "").c_str());
  return bad ? 1 : 0;
}

int cmd_restore(const context& cx, const checkpoint_options& o) {
  auto ref = checkpoint::parse_ref(o.ref);
  if (!ref) {
    std::fprintf(stderr, "shoalctl: %s\n", ref.error().message.c_str());
    return 2;
  }
  auto headers = auth_header(o);
  if (headers.empty()) return 2;
  std::error_code ec;
  if (!o.dir.empty() && fs::symlink_status(o.dir, ec).type() != fs::file_type::not_found) {
    std::fprintf(stderr, "shoalctl: %s exists: restore links a new path to the view\n",
                 o.dir.c_str());
    return 2;
  }
  json body = {{"checkpoint", o.ref}};
  if (!o.ranks.empty()) body["ranks"] = o.ranks;
  auto r = request(cx, "POST", cx.peerd + std::string(checkpoint::paths::node_restore),
                   json_text(body), std::chrono::seconds(60), headers);
  if (!r || (r->status != 200 && r->status != 202)) return report("checkpoint restore " + o.ref, r);
  std::optional<json> j = json::parse(r->body, nullptr, false);
  std::string key = j->is_object() ? j->value("checkpoint", "") : "";
  if (key.empty()) {
    std::fprintf(stderr, "shoalctl: peerd answered without the checkpoint it restores\n");
    return 1;
  }
  if (o.wait)
    j = follow(cx, cx.peerd + std::string(checkpoint::paths::node) + "/" + key, o.timeout,
               progress_line, {"ready", "failed"}, key, std::chrono::milliseconds(300));
  if (!j) return 1;
  if (!o.wait) {  // started: what it is doing now
    if (!print_document(*j, cx.out)) std::printf("%s\n", progress_line(*j).c_str());
    return j->value("state", "") == "failed" ? 1 : 0;
  }
  bool ok = j->value("state", "") == "ready";
  if (ok && !o.dir.empty() && (*j)["view"].is_string()) {
    fs::create_symlink((*j)["view"].get<std::string>(), o.dir, ec);
    if (ec) {
      std::fprintf(stderr, "shoalctl: link %s to the view: %s\n", o.dir.c_str(),
                   ec.message().c_str());
      return 1;
    }
  }
  if (!print_document(*j, cx.out)) {
    dataset_summary(*j);
    if (ok && !o.dir.empty()) std::printf("  %s -> the view\n", o.dir.c_str());
  }
  return ok ? 0 : 1;
}

int cmd_ls(const context& cx, const checkpoint_options& o) {
  if (o.node) {
    auto restores = get_json(cx, "checkpoint ls --node",
                             cx.peerd + std::string(checkpoint::paths::node), is_array);
    auto pubs = get_json(cx, "checkpoint ls --node",
                         cx.peerd + std::string(checkpoint::paths::node_published), is_array);
    if (!restores || !pubs) return 1;
    json doc = {{"restored", *restores}, {"published", *pubs}};
    if (print_document(doc, cx.out)) return 0;
    std::printf("%-40s %-10s %-12s %10s %9s\n", "CHECKPOINT", "HOW", "STATE", "BYTES", "FILES");
    for (const auto& p : *pubs)
      std::printf("%-40s %-10s %-12s %10s %9.0f\n", p.value("checkpoint", "").c_str(), "published",
                  p.value("state", "").c_str(), human(num_of(p, "bytes")).c_str(),
                  num_of(p, "files"));
    for (const auto& p : *restores)
      std::printf("%-40s %-10s %-12s %10s %9.0f\n", p.value("checkpoint", "").c_str(), "restored",
                  p.value("state", "").c_str(), human(num_of(p, "bytes")).c_str(),
                  num_of(p, "files"));
    return 0;
  }
  std::string url = cx.scheduler + std::string(checkpoint::paths::scheduler);
  if (!o.job.empty()) url += "?job=" + o.job;
  auto j = get_json(cx, "checkpoint ls", url, is_object);
  if (!j) return 1;
  if (print_document(*j, cx.out)) return 0;
  // Holders are in one checkpoint's record (GET /v1/checkpoints/<J@N>), not in the list.
  std::printf("%-40s %9s %10s %7s %-16s %s\n", "CHECKPOINT", "FILES", "BYTES", "GROUPS", "WRITER",
              "PUBLISHED");
  for (const auto& c : j->value("checkpoints", json::array())) {
    auto ms = static_cast<std::int64_t>(num_of(c, "published_ms"));
    std::string when = utc_rfc3339(std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::milliseconds(ms))));
    std::printf("%-40s %9.0f %10s %7.0f %-16s %s\n", c.value("checkpoint", "").c_str(),
                num_of(c, "files"), human(num_of(c, "bytes")).c_str(), num_of(c, "groups"),
                c.value("writer", "").c_str(), when.c_str());
  }
  return 0;
}

int cmd_rm(const context& cx, const checkpoint_options& o) {
  auto ref = checkpoint::parse_ref(o.ref, false);
  if (!ref) {
    std::fprintf(stderr, "shoalctl: %s\n", ref.error().message.c_str());
    return 2;
  }
  std::string key = ref->str();
  if (o.cluster) {
    auto r =
        request(cx, "DELETE", cx.scheduler + std::string(checkpoint::paths::scheduler) + "/" + key);
    if (!r || r->status != 200) return report("checkpoint rm --cluster " + key, r);
    std::printf("%s: forgotten by the scheduler\n", key.c_str());
    return 0;
  }
  auto headers = auth_header(o);
  if (headers.empty()) return 2;
  auto r = request(cx, "DELETE", cx.peerd + std::string(checkpoint::paths::node) + "/" + key, {},
                   std::chrono::seconds(60), headers);
  if (!r || r->status != 200) return report("checkpoint rm " + key, r);
  std::printf("%s: view removed and objects unpinned on this node\n", key.c_str());
  return 0;
}

}  // namespace

checkpoint_commands add_checkpoint_commands(CLI::App& app, checkpoint_options& o) {
  o.token_file = env_or("SHOAL_CHECKPOINT_TOKEN_FILE", "/etc/shoal/checkpoint-token");
  auto* c = app.add_subcommand("checkpoint", "Checkpoints: publish, restore, ls, rm");
  c->require_subcommand(1, 1);
  c->add_option("--checkpoint-token-file", o.token_file,
                "peerd's checkpoints.token_file ($SHOAL_CHECKPOINT_TOKEN_FILE)")
      ->capture_default_str();
  checkpoint_commands out;
  out.publish = c->add_subcommand("publish", "Publish a checkpoint directory written here");
  out.publish->add_option("dir", o.dir, "The directory (under peerd's checkpoints.publish_root)")
      ->required();
  out.publish->add_option("--job", o.job, "The job's name")->required();
  out.publish->add_option("--step", o.step, "The training step")->required();
  out.publish->add_option("--ranks-file", o.ranks_file,
                          "JSON {\"path\": [ranks]} (default: ranks from file names)");
  out.restore = c->add_subcommand("restore", "Restore a checkpoint onto this node over P2P");
  out.restore->add_option("ref", o.ref, "JOB@STEP, JOB@latest or JOB")->required();
  out.restore->add_option("dir", o.dir, "A new path linked to the restored view (optional)");
  out.restore->add_option("--ranks", o.ranks, "Only these ranks' files (\"0,3\")");
  for (auto* s : {out.publish, out.restore}) {
    s->add_flag("--wait,!--no-wait", o.wait, "Follow progress until done (default), or return");
    s->add_option("--timeout", o.timeout, "Give up following after this many seconds")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
  }
  out.ls = c->add_subcommand("ls", "Checkpoints the scheduler knows (--node: this node's)");
  out.ls->add_option("--job", o.job, "Only this job's");
  out.ls->add_flag("--node", o.node, "This node's publishes and restores");
  out.rm = c->add_subcommand("rm", "Remove a restored checkpoint's view and pins on this node");
  out.rm->add_option("ref", o.ref, "JOB@STEP")->required();
  out.rm->add_flag("--cluster", o.cluster, "Forget the scheduler's record instead (operator)");
  return out;
}

int run_checkpoint(const checkpoint_commands& c, const context& cx, const checkpoint_options& o) {
  if (c.publish && c.publish->parsed()) return cmd_publish(cx, o);
  if (c.restore && c.restore->parsed()) return cmd_restore(cx, o);
  if (c.ls && c.ls->parsed()) return cmd_ls(cx, o);
  if (c.rm && c.rm->parsed()) return cmd_rm(cx, o);
  return -1;
}

}  // namespace shoal::tools::ctl

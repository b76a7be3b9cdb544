#pragma once
// shoalctl's output: the -o json|yaml|table choice, JSON documents rendered as YAML, byte counts
// for people, and the rate and ETA of a transfer followed by polling.

#include <chrono>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace shoal::tools::ctl {

enum class format { table, json, yaml };

// "json", "yaml" or "table".
[[nodiscard]] std::optional<format> parse_format(std::string_view s);

// Block YAML of a JSON document: maps and lists in block style, strings quoted only where YAML
// would read them as something else ("true", "1.5", "", "null").
[[nodiscard]] std::string to_yaml(const nlohmann::json& j);

// Writes `j` to stdout as JSON (indented) or YAML; returns false (writing nothing) for table,
// which each command draws itself.
bool print_document(const nlohmann::json& j, format f);

// 1536 → "1.5 KiB".
[[nodiscard]] std::string human(double bytes);

// "[#####...................]": `frac` of `width` cells filled.
[[nodiscard]] std::string bar(double frac, int width = 24);

// Rate of a growing byte count from the samples of the last `window`, and the time left at that
// rate. Not thread-safe; one per followed transfer.
class rate_meter {
 public:
  explicit rate_meter(std::chrono::seconds window = std::chrono::seconds(10)) : window_(window) {}
  void add(std::chrono::steady_clock::time_point t, double bytes_done);
  // Bytes per second over the window; 0 until two samples are apart.
  [[nodiscard]] double rate() const;
  // Seconds until `total` at rate(); nullopt while the rate is unknown or zero.
  [[nodiscard]] std::optional<double> eta(double total) const;

 private:
  std::chrono::seconds window_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, double>> samples_;
};

// "42s", "3m05s", "1h02m"; "-" for nullopt.
[[nodiscard]] std::string eta_text(std::optional<double> seconds);

}  // namespace shoal::tools::ctl

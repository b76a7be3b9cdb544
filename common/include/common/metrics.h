#pragma once
// Metrics: counters, gauges and histograms with labels, exposed in the Prometheus text format
// 0.0.4 (what `promtool check metrics` accepts).
//
//   metrics::registry reg;  // one per daemon, built in app.cc
//   auto& req = reg.counter("shoal_http_requests_total", "HTTP requests served.",
//                           {"route", "code"});
//   metrics::counter& ok = req.with({"/v2/blobs", "200"});  // look up once, keep the reference
//   ok.inc();                                               // lock-free, any thread
//   auto& lat = reg.histogram("shoal_http_request_seconds", "Request latency.", {"route"},
//                             metrics::default_buckets());
//   lat.with({"/v2/blobs"}).observe(0.012);
//   reg.gauge_fn("shoal_cache_bytes", "Bytes in the cache.",
//                [&] { return double(cache.bytes()); });
//   std::string body = reg.expose();  // serve with metrics::content_type
//
// Registration mistakes are programming errors and abort the process with a message naming the
// metric: a name that is not lower snake_case ([a-z_][a-z0-9_]*), a counter not ending in
// "_total", another type ending in "_total", "_count", "_sum" or "_bucket", empty help, a bad
// or reserved label name ("le", "__*"), bad buckets, the same name registered twice with a
// different shape, or with() given the wrong number of label values. These are stricter than
// Prometheus' own rules on purpose: they are what `promtool check metrics` lints.
//
// Families and cells are never removed, so references stay valid for the registry's lifetime;
// label values must come from a bounded set (routes, status codes, upstream names), never from
// unbounded input such as digests or client addresses.

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::metrics {

// Content-Type of registry::expose() output.
inline constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

// A count that only goes up (requests, bytes sent). Lock-free; safe from any thread.
class counter {
 public:
  void inc(std::uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

// A value that goes up and down (bytes in use, connections open). Lock-free; any thread.
class gauge {
 public:
  void set(double v) noexcept { v_.store(v, std::memory_order_relaxed); }
  void inc(double d = 1) noexcept { v_.fetch_add(d, std::memory_order_relaxed); }
  void dec(double d = 1) noexcept { v_.fetch_sub(d, std::memory_order_relaxed); }
  [[nodiscard]] double value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// A distribution over fixed buckets (latencies in seconds, sizes in bytes). observe() is
// lock-free; a snapshot taken while observations race may see the sum slightly ahead of or
// behind the counts, but the counts are always consistent with each other (count = +Inf bucket).
// NaN observations are ignored. The bucket bounds belong to the family and outlive the cell.
class histogram {
 public:
  explicit histogram(const std::vector<double>& bounds);
  void observe(double v) noexcept;

  struct snapshot {
    std::vector<std::uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  [[nodiscard]] snapshot snap() const;

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // per bucket (not cumulative), then +Inf
  std::atomic<double> sum_{0};
};

// Observes the time from construction to destruction, in seconds, into a histogram.
class scoped_timer {
 public:
  explicit scoped_timer(histogram& h) noexcept;
  ~scoped_timer();
  scoped_timer(const scoped_timer&) = delete;
  scoped_timer& operator=(const scoped_timer&) = delete;

 private:
  histogram& h_;
  std::int64_t start_ns_;
};

enum class metric_type : std::uint8_t { counter, gauge, histogram };

// Bucket helpers. default_buckets() are Prometheus' defaults for latencies in seconds
// (5ms .. 10s).
[[nodiscard]] std::vector<double> default_buckets();
// start, start*factor, ... (count bounds). start > 0, factor > 1.
[[nodiscard]] std::vector<double> exponential_buckets(double start, double factor, int count);
// start, start+width, ... (count bounds). width > 0.
[[nodiscard]] std::vector<double> linear_buckets(double start, double width, int count);

// Name checks used at registration (exposed for tests and for callers that build names).
[[nodiscard]] bool valid_metric_name(std::string_view name) noexcept;
[[nodiscard]] bool valid_label_name(std::string_view name) noexcept;

namespace detail {

// What every family shares; the registry owns families through this base.
class family_base {
 public:
  family_base(std::string name, std::string help, metric_type type,
              std::vector<std::string> labels);
  virtual ~family_base() = default;
  family_base(const family_base&) = delete;
  family_base& operator=(const family_base&) = delete;

  // Appends "# HELP", "# TYPE" and every sample; appends nothing when there is no sample.
  virtual void render(std::string& out) const = 0;
  [[nodiscard]] virtual bool is_callback() const noexcept { return false; }

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::string& help() const noexcept { return help_; }
  [[nodiscard]] metric_type type() const noexcept { return type_; }
  [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }

 protected:
  void render_header(std::string& out) const;

  std::string name_;
  std::string help_;
  metric_type type_;
  std::vector<std::string> labels_;
};

[[noreturn]] void programming_error(const std::string& message);

}  // namespace detail

// All cells of one metric name, one per combination of label values. Created by the registry;
// lives as long as it. Thread-safe: with() takes a mutex, so look a cell up once and keep the
// reference on hot paths.
template <class Cell>
class family final : public detail::family_base {
 public:
  family(std::string name, std::string help, metric_type type, std::vector<std::string> labels,
         std::vector<double> bounds);

  // The cell for these label values (in the order the label names were given), created at
  // first use. Aborts when the number of values differs from the number of label names.
  Cell& with(std::initializer_list<std::string_view> values = {});
  Cell& with(std::span<const std::string> values);

  void render(std::string& out) const override;
  [[nodiscard]] const std::vector<double>& bounds() const noexcept { return bounds_; }

 private:
  Cell& get(std::vector<std::string> values);

  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Cell>> cells_;
};

extern template class family<counter>;
extern template class family<gauge>;
extern template class family<histogram>;

using counter_family = family<counter>;
using gauge_family = family<gauge>;
using histogram_family = family<histogram>;

// The set of metric families a process exposes. Non-copyable, non-movable; usually one per
// daemon, created at start-up and passed by reference to what records metrics. All members are
// thread-safe. Callbacks run inside expose() on the scraping thread, with no registry lock
// held; they must be fast and must not throw.
class registry {
 public:
  registry();
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  // Registering a name again with the same type, help, labels (and buckets) returns the
  // existing family.
  counter_family& counter(std::string_view name, std::string_view help,
                          std::vector<std::string> labels = {});
  gauge_family& gauge(std::string_view name, std::string_view help,
                      std::vector<std::string> labels = {});
  histogram_family& histogram(std::string_view name, std::string_view help,
                              std::vector<std::string> labels, std::vector<double> buckets);
  // Label-less metrics whose value is computed at scrape time (cache bytes, queue lengths).
  void gauge_fn(std::string_view name, std::string_view help, std::function<double()> fn);
  void counter_fn(std::string_view name, std::string_view help, std::function<double()> fn);

  // The text exposition of every family, sorted by name; cells sorted by label values.
  [[nodiscard]] std::string expose() const;

 private:
  detail::family_base* find_or_check(std::string_view name, std::string_view help, metric_type t,
                                     const std::vector<std::string>& labels, bool callback);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<detail::family_base>, std::less<>> families_;
};

// Registers the standard process metrics, read from /proc at scrape time:
// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds and process_start_time_seconds. Opt-in: call once per
// registry. A value that cannot be read is exposed as NaN.
void register_process_metrics(registry& reg);

}  // namespace shoal::metrics

// Metric cells, families, the registry and the Prometheus text exposition (format 0.0.4).

#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shoal::metrics {
namespace {

void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, ec == std::errc() ? p : buf);
  }
}

// Appends `s` with invalid UTF-8 replaced by U+FFFD: label values often come from requests,
// and a scraper rejects the whole exposition on one bad byte.
void append_utf8(std::string& out, std::string_view s, bool label_value) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\\')
        out += "\\\\";
      else if (c == '\n')
        out += "\\n";
      else if (c == '"' && label_value)
        out += "\\\"";
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    ok = ok && !(len == 3 && cp < 0x800) && !(len == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
         !(cp >= 0xd800 && cp <= 0xdfff);
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
}

// `{a="x",b="y"}` for the given names and values, plus an optional trailing le label.
void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values, const std::string* le = nullptr) {
  if (names.empty() && le == nullptr) return;
  out += '{';
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    append_utf8(out, values[i], true);
    out += '"';
  }
  if (le != nullptr) {
    if (!names.empty()) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

std::string_view type_text(metric_type t) {
  switch (t) {
    case metric_type::counter:
      return "counter";
    case metric_type::gauge:
      return "gauge";
    case metric_type::histogram:
      return "histogram";
  }
  return "untyped";
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// A label-less family whose value comes from a callback at scrape time.
class callback_family final : public detail::family_base {
 public:
  callback_family(std::string name, std::string help, metric_type type, std::function<double()> fn)
      : family_base(std::move(name), std::move(help), type, {}), fn_(std::move(fn)) {}

  void render(std::string& out) const override {
    double v = 0;
    try {
      v = fn_();
    } catch (...) {
      return;  // a failing callback drops its metric from this scrape, never the whole page
    }
    render_header(out);
    out += name_;
    out += ' ';
    append_number(out, v);
    out += '\n';
  }
  [[nodiscard]] bool is_callback() const noexcept override { return true; }

 private:
  std::function<double()> fn_;
};

void check_shape(std::string_view name, std::string_view help, metric_type t,
                 const std::vector<std::string>& labels) {
  const std::string n(name);
  if (!valid_metric_name(name)) {
    detail::programming_error("metric name \"" + n +
                              "\" is not lower snake_case ([a-z_][a-z0-9_]*)");
  }
  if (help.empty()) detail::programming_error("metric " + n + " has no help text");
  if (t == metric_type::counter && !ends_with(name, "_total")) {
    detail::programming_error("counter " + n + " must end in _total");
  }
  if (t != metric_type::counter) {
    for (std::string_view s : {"_total", "_count", "_sum", "_bucket"}) {
      if (ends_with(name, s)) {
        detail::programming_error(std::string(type_text(t)) + " " + n + " must not end in " +
                                  std::string(s));
      }
    }
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (!valid_label_name(labels[i])) {
      detail::programming_error("metric " + n + ": label name \"" + labels[i] +
                                "\" is not lower snake_case or starts with __");
    }
    if (t == metric_type::histogram && labels[i] == "le") {
      detail::programming_error("histogram " + n + ": label name \"le\" is reserved");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j] == labels[i]) {
        detail::programming_error("metric " + n + ": label \"" + labels[i] + "\" given twice");
      }
    }
  }
}

}  // namespace

// ---- cells ---------------------------------------------------------------------------------

histogram::histogram(const std::vector<double>& bounds)
    : bounds_(&bounds), counts_(new std::atomic<std::uint64_t>[bounds.size() + 1]) {
  for (std::size_t i = 0; i <= bounds.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void histogram::observe(double v) noexcept {
  if (std::isnan(v)) return;
  // Bucket i counts values <= bounds[i] (Prometheus "le"); the first bound >= v is the bucket.
  const auto it = std::lower_bound(bounds_->begin(), bounds_->end(), v);
  counts_[static_cast<std::size_t>(it - bounds_->begin())].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

histogram::snapshot histogram::snap() const {
  snapshot s;
  s.cumulative.resize(bounds_->size() + 1);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bounds_->size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

scoped_timer::scoped_timer(histogram& h) noexcept : h_(h), start_ns_(now_ns()) {}
scoped_timer::~scoped_timer() { h_.observe(static_cast<double>(now_ns() - start_ns_) / 1e9); }

// ---- helpers -------------------------------------------------------------------------------

std::vector<double> default_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    detail::programming_error("exponential_buckets needs start > 0, factor > 1, count >= 1");
  }
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::vector<double> linear_buckets(double start, double width, int count) {
  if (!(width > 0) || count < 1)
    detail::programming_error("linear_buckets needs width > 0, count >= 1");
  std::vector<double> b;
  for (int i = 0; i < count; ++i) b.push_back(start + width * i);
  return b;
}

bool valid_metric_name(std::string_view name) noexcept {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool valid_label_name(std::string_view name) noexcept {
  return valid_metric_name(name) && !name.starts_with("__");
}

namespace detail {

family_base::family_base(std::string name, std::string help, metric_type type,
                         std::vector<std::string> labels)
    : name_(std::move(name)), help_(std::move(help)), type_(type), labels_(std::move(labels)) {}

void family_base::render_header(std::string& out) const {
  out += "# HELP ";
  out += name_;
  out += ' ';
  append_utf8(out, help_, false);
  out += "\n# TYPE ";
  out += name_;
  out += ' ';
  out += type_text(type_);
  out += '\n';
}

void programming_error(const std::string& message) {
  std::fprintf(stderr, "shoal::metrics: programming error: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail

// ---- families ------------------------------------------------------------------------------

template <class Cell>
family<Cell>::family(std::string name, std::string help, metric_type type,
                     std::vector<std::string> labels, std::vector<double> bounds)
    : family_base(std::move(name), std::move(help), type, std::move(labels)),
      bounds_(std::move(bounds)) {
  // A label-less metric exists from registration on, so it is exposed as 0 rather than absent.
  if (labels_.empty()) (void)get({});
}

template <class Cell>
Cell& family<Cell>::with(std::initializer_list<std::string_view> values) {
  return get(std::vector<std::string>(values.begin(), values.end()));
}

template <class Cell>
Cell& family<Cell>::with(std::span<const std::string> values) {
  return get(std::vector<std::string>(values.begin(), values.end()));
}

template <class Cell>
Cell& family<Cell>::get(std::vector<std::string> values) {
  if (values.size() != labels_.size()) {
    detail::programming_error("metric " + name_ + " has " + std::to_string(labels_.size()) +
                              " labels, with() got " + std::to_string(values.size()) + " values");
  }
  std::lock_guard lock(mu_);
  auto it = cells_.find(values);
  if (it != cells_.end()) return *it->second;
  std::unique_ptr<Cell> cell;
  if constexpr (std::is_same_v<Cell, metrics::histogram>) {
    cell = std::make_unique<Cell>(bounds_);
  } else {
    cell = std::make_unique<Cell>();
  }
  Cell& ref = *cell;
  cells_.emplace(std::move(values), std::move(cell));
  return ref;
}

template <class Cell>
void family<Cell>::render(std::string& out) const {
  std::lock_guard lock(mu_);
  if (cells_.empty()) return;
  render_header(out);
  for (const auto& [values, cell] : cells_) {
    if constexpr (std::is_same_v<Cell, metrics::histogram>) {
      const auto s = cell->snap();
      for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        std::string le;
        if (i < bounds_.size())
          append_number(le, bounds_[i]);
        else
          le = "+Inf";
        out += name_;
        out += "_bucket";
        append_labels(out, labels_, values, &le);
        out += ' ';
        out += std::to_string(s.cumulative[i]);
        out += '\n';
      }
      out += name_;
      out += "_sum";
      append_labels(out, labels_, values);
      out += ' ';
      append_number(out, s.sum);
      out += '\n';
      out += name_;
      out += "_count";
      append_labels(out, labels_, values);
      out += ' ';
      out += std::to_string(s.count);
      out += '\n';
    } else {
      out += name_;
      append_labels(out, labels_, values);
      out += ' ';
      if constexpr (std::is_same_v<Cell, metrics::counter>) {
        out += std::to_string(cell->value());
      } else {
        append_number(out, cell->value());
      }
      out += '\n';
    }
  }
}

template class family<counter>;
template class family<gauge>;
template class family<histogram>;

// ---- registry ------------------------------------------------------------------------------

registry::registry() = default;
registry::~registry() = default;

detail::family_base* registry::find_or_check(std::string_view name, std::string_view help,
                                             metric_type t, const std::vector<std::string>& labels,
                                             bool callback) {
  check_shape(name, help, t, labels);
  auto it = families_.find(name);
  if (it == families_.end()) return nullptr;
  const auto& f = *it->second;
  if (callback || f.is_callback() || f.type() != t || f.help() != help || f.labels() != labels) {
    detail::programming_error("metric " + std::string(name) +
                              " registered twice with a different type, help or labels");
  }
  return it->second.get();
}

counter_family& registry::counter(std::string_view name, std::string_view help,
                                  std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  if (auto* f = find_or_check(name, help, metric_type::counter, labels, false)) {
    return static_cast<counter_family&>(*f);
  }
  auto f =
      std::make_unique<counter_family>(std::string(name), std::string(help), metric_type::counter,
                                       std::move(labels), std::vector<double>{});
  auto& ref = *f;
  families_.emplace(std::string(name), std::move(f));
  return ref;
}

gauge_family& registry::gauge(std::string_view name, std::string_view help,
                              std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  if (auto* f = find_or_check(name, help, metric_type::gauge, labels, false)) {
    return static_cast<gauge_family&>(*f);
  }
  auto f = std::make_unique<gauge_family>(std::string(name), std::string(help), metric_type::gauge,
                                          std::move(labels), std::vector<double>{});
  auto& ref = *f;
  families_.emplace(std::string(name), std::move(f));
  return ref;
}

histogram_family& registry::histogram(std::string_view name, std::string_view help,
                                      std::vector<std::string> labels,
                                      std::vector<double> buckets) {
  if (buckets.empty())
    detail::programming_error("histogram " + std::string(name) + " has no buckets");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i]) || (i > 0 && !(buckets[i - 1] < buckets[i]))) {
      detail::programming_error("histogram " + std::string(name) +
                                ": buckets must be finite and strictly increasing");
    }
  }
  std::lock_guard lock(mu_);
  if (auto* f = find_or_check(name, help, metric_type::histogram, labels, false)) {
    auto& h = static_cast<histogram_family&>(*f);
    if (h.bounds() != buckets) {
      detail::programming_error("histogram " + std::string(name) +
                                " registered twice with different buckets");
    }
    return h;
  }
  auto f = std::make_unique<histogram_family>(std::string(name), std::string(help),
                                              metric_type::histogram, std::move(labels),
                                              std::move(buckets));
  auto& ref = *f;
  families_.emplace(std::string(name), std::move(f));
  return ref;
}

void registry::gauge_fn(std::string_view name, std::string_view help, std::function<double()> fn) {
  std::lock_guard lock(mu_);
  (void)find_or_check(name, help, metric_type::gauge, {}, true);
  families_.emplace(std::string(name),
                    std::make_unique<callback_family>(std::string(name), std::string(help),
                                                      metric_type::gauge, std::move(fn)));
}

void registry::counter_fn(std::string_view name, std::string_view help,
                          std::function<double()> fn) {
  std::lock_guard lock(mu_);
  (void)find_or_check(name, help, metric_type::counter, {}, true);
  families_.emplace(std::string(name),
                    std::make_unique<callback_family>(std::string(name), std::string(help),
                                                      metric_type::counter, std::move(fn)));
}

std::string registry::expose() const {
  // Families are never removed, so the pointers stay valid after the lock is released; rendering
  // (and the callbacks it runs) happens without the registry lock.
  std::vector<const detail::family_base*> snapshot;
  {
    std::lock_guard lock(mu_);
    snapshot.reserve(families_.size());
    for (const auto& [name, f] : families_) snapshot.push_back(f.get());
  }
  std::string out;
  for (const auto* f : snapshot) f->render(out);
  return out;
}

}  // namespace shoal::metrics

#pragma once
// A strict JSON parser for hot, untrusted documents (heartbeats): one pass over the text into a
// flat array of nodes, strings without escapes pointing into the text, so that parsing a
// document costs one allocation or two instead of one per value and string (nlohmann's DOM, which
// decoding a heartbeat spent most of its time building and freeing).
//
// It accepts exactly what nlohmann::json::parse accepts (RFC 8259: UTF-8 validated, escapes and
// surrogate pairs decoded, no comments, a leading UTF-8 BOM skipped, nothing after the value),
// and classifies numbers the same way: unsigned integer, negative integer, or float (one with a
// fraction or exponent, or an integer out of range; a float past double's range is an error).
// One difference, on purpose: nlohmann takes a NUL byte after the value for the end of the input
// and ignores what follows; here it is text after the value, an error. tests/fuzz's flat_json
// harness compares the two on every input.
//
//   auto doc = flat_json::parse(text);            // result<document>: error with byte offset
//   flat_json::value root = doc->root();
//   if (auto v = root.find("seq"); v && v.is_unsigned()) use(v.as_u64());
//   for (auto m : root.find("labels").members()) use(m.key, m.value.as_string());
//   for (auto x : root.find("objects").elements()) ...
//
// A document owns its nodes and decoded strings but not the text: the text must outlive it (and
// every value and string_view taken from it). Objects keep every member as written; find()
// returns the last one of a name (nlohmann's last-wins). Not thread-safe to build; const use
// from several threads is safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace shoal::flat_json {

enum class kind : std::uint8_t {
  null,
  boolean,
  number_unsigned,
  number_integer,  // negative (or -0)
  number_float,
  string,
  array,
  object
};

class document;
class parser;

// One value of a document, or none (a find() that found nothing): a cheap handle.
class value {
 public:
  value() = default;
  [[nodiscard]] explicit operator bool() const noexcept { return doc_ != nullptr; }
  [[nodiscard]] kind type() const noexcept;
  [[nodiscard]] bool is_null() const noexcept { return type() == kind::null; }
  [[nodiscard]] bool is_bool() const noexcept { return type() == kind::boolean; }
  [[nodiscard]] bool is_unsigned() const noexcept { return type() == kind::number_unsigned; }
  [[nodiscard]] bool is_integer() const noexcept {
    return type() == kind::number_unsigned || type() == kind::number_integer;
  }
  [[nodiscard]] bool is_string() const noexcept { return type() == kind::string; }
  [[nodiscard]] bool is_array() const noexcept { return type() == kind::array; }
  [[nodiscard]] bool is_object() const noexcept { return type() == kind::object; }

  // The value as that type (0, false or "" when it is another).
  [[nodiscard]] bool as_bool() const noexcept;
  [[nodiscard]] std::uint64_t as_u64() const noexcept;  // number_unsigned
  [[nodiscard]] std::int64_t as_i64() const noexcept;   // number_integer (negative or -0)
  [[nodiscard]] double as_double() const noexcept;      // any number
  [[nodiscard]] std::string_view as_string() const noexcept;
  // Elements of an array, members of an object as written (duplicates included); 0 otherwise.
  [[nodiscard]] std::size_t size() const noexcept;
  // The value's text as written in the document (a document inside a document).
  [[nodiscard]] std::string_view source() const noexcept;
  // An object's last member named `key`; none when absent or not an object.
  [[nodiscard]] value find(std::string_view key) const noexcept;

  struct member;
  class element_range;
  class member_range;
  [[nodiscard]] element_range elements() const noexcept;  // empty unless an array
  [[nodiscard]] member_range members() const noexcept;    // empty unless an object

 private:
  friend class document;
  value(const document* d, std::uint32_t i) : doc_(d), i_(i) {}
  const document* doc_ = nullptr;
  std::uint32_t i_ = 0;
};

struct value::member {
  std::string_view key;
  flat_json::value value;
};

class value::element_range {
 public:
  class iterator {
   public:
    flat_json::value operator*() const noexcept { return {doc_, i_}; }
    iterator& operator++() noexcept;
    bool operator!=(const iterator& o) const noexcept { return i_ != o.i_; }

   private:
    friend class element_range;
    iterator(const document* d, std::uint32_t i) : doc_(d), i_(i) {}
    const document* doc_;
    std::uint32_t i_;
  };
  [[nodiscard]] iterator begin() const noexcept { return {doc_, first_}; }
  [[nodiscard]] iterator end() const noexcept { return {doc_, end_}; }

 private:
  friend class value;
  element_range(const document* d, std::uint32_t first, std::uint32_t end)
      : doc_(d), first_(first), end_(end) {}
  const document* doc_;
  std::uint32_t first_, end_;
};

class value::member_range {
 public:
  class iterator {
   public:
    member operator*() const noexcept;
    iterator& operator++() noexcept;
    bool operator!=(const iterator& o) const noexcept { return i_ != o.i_; }

   private:
    friend class member_range;
    iterator(const document* d, std::uint32_t i) : doc_(d), i_(i) {}
    const document* doc_;
    std::uint32_t i_;  // the member's key node
  };
  [[nodiscard]] iterator begin() const noexcept { return {doc_, first_}; }
  [[nodiscard]] iterator end() const noexcept { return {doc_, end_}; }

 private:
  friend class value;
  member_range(const document* d, std::uint32_t first, std::uint32_t end)
      : doc_(d), first_(first), end_(end) {}
  const document* doc_;
  std::uint32_t first_, end_;
};

class document {
 public:
  [[nodiscard]] value root() const noexcept { return {this, 0}; }
  [[nodiscard]] std::size_t nodes() const noexcept { return nodes_.size(); }

 private:
  friend class value;
  friend class parser;
  struct node {
    kind k = kind::null;
    bool unescaped = false;  // a string whose bytes are in decoded_ (it had escapes)
    std::uint32_t end = 0;   // index one past this node's subtree
    std::uint32_t begin_at = 0, size_or_len = 0;  // source offset; members/elements or length
    union {
      std::uint64_t u;
      std::int64_t i;
      double d;
      std::uint32_t at;  // strings: offset of the bytes (text or decoded_); containers: source end
    } v{0};
  };
  std::string_view text_;
  std::vector<node> nodes_;
  std::string decoded_;  // strings that had escapes, decoded
};

// Parses `text` (at most 4 GiB - 1 bytes, nesting at most `max_depth`). The error says what is
// wrong and at which byte.
[[nodiscard]] result<document> parse(std::string_view text, int max_depth = 512);

}  // namespace shoal::flat_json

// Shoal super seeding: the origin's plugin (offers pieces one node at a time with HAVE messages,
// first copies before second ones) and the node's (ignores a super-seeding origin's have-all and
// counts the blocks it sends). swarm.h documents both; docs/p2p.md has the measurements behind
// the rules.
#include <libtorrent/bdecode.hpp>
#include <libtorrent/entry.hpp>
#include <libtorrent/extensions.hpp>
#include <libtorrent/peer_connection_handle.hpp>
#include <libtorrent/peer_info.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <unordered_map>

#include "swarm/swarm.h"

namespace shoal::swarm {

namespace {

// The piece count of an origin torrent, carried in add_torrent_params::userdata as the pointer
// value itself (never dereferenced), so the plugin needs no lifetime management and no
// synchronous torrent_handle call (those deadlock on the network thread, where plugins run).
struct superseed_tag;

bool has_prefix(const lt::peer_id& pid, std::string_view prefix) {
  return std::equal(prefix.begin(), prefix.end(), pid.begin());
}

// Payload sent of one piece: the bytes, and the end of the furthest block. Bytes beyond that end
// were sent more than once (exact once every block went out; a lower bound until then), without
// knowing the piece length. add() returns how many more bytes are now known to be repeats.
struct sent_span {
  std::uint32_t bytes = 0;
  std::uint32_t end = 0;
  std::uint64_t add(const lt::peer_request& r) {
    auto before = repeats();
    bytes += static_cast<std::uint32_t>(r.length);
    end = std::max(end, static_cast<std::uint32_t>(r.start + r.length));
    return repeats() - before;
  }
  [[nodiscard]] std::uint64_t repeats() const { return bytes > end ? bytes - end : 0; }
};

// Per origin torrent: which connected peers hold each piece and which pieces are on offer. Lives
// on the network thread (every plugin callback runs there), so it needs no lock.
struct superseed_state {
  superseed_state(int n, int offers, bool ordered, int cap, std::shared_ptr<superseed_counters> c)
      : pieces(n),
        offers_per_peer(offers),
        max_in_flight(cap),
        in_order(ordered),
        have(n),
        offered(n),
        sent(n),
        counters(c ? std::move(c) : std::make_shared<superseed_counters>()) {}
  int pieces;
  // Pieces on offer at once: a lone node gets them all, N nodes offers_per_peer / N each (at least
  // one), all together at most max_in_flight. The origin's link sends the offered pieces side by
  // side, so each arrives only after all: 8 per node put 8 × N first copies at the end together
  // (1.46 × S/B at 8 nodes, 1.61 at 16; one per node: 1.23, 1.25), and without the bound every
  // piece of a small blob would be on offer in a large swarm (docs/p2p.md "Scale curve").
  int offers_per_peer;
  int max_in_flight;
  int in_flight = 0;
  int nodes = 0;  // connected peers that take offers (Shoal nodes)
  bool in_order;
  std::vector<std::uint16_t> have;     // connected peers that hold the piece
  std::vector<std::uint16_t> offered;  // outstanding offers of the piece
  std::vector<sent_span> sent;         // payload sent of each piece, to every connection together
  std::shared_ptr<superseed_counters> counters;
  std::minstd_rand rng{std::random_device{}()};

  // An offer of piece p made, and one taken up, expired or dropped with its connection.
  void hold(int p) {
    ++offered[static_cast<std::size_t>(p)];
    ++in_flight;
  }
  void release(int p) {
    --offered[static_cast<std::size_t>(p)];
    --in_flight;
  }

  // A first copy: no connected peer holds the piece and nobody has it on offer.
  [[nodiscard]] bool first_copy(int p) const {
    return have[static_cast<std::size_t>(p)] == 0 && offered[static_cast<std::size_t>(p)] == 0;
  }

  // The piece to offer a peer that holds `peer_has` and was already offered `announced`: nobody
  // holds it and it is not on offer if such a piece is left, else the least held one; ties go to
  // the lowest index (in_order) or are broken at random. -1: nothing to offer.
  int pick(const std::vector<bool>& peer_has, const std::vector<bool>& announced) {
    int best = -1;
    std::uint64_t best_score = UINT64_MAX;
    int ties = 0;
    for (int p = 0; p < pieces; ++p) {
      if (peer_has[static_cast<std::size_t>(p)] || announced[static_cast<std::size_t>(p)]) continue;
      std::uint64_t score =
          (static_cast<std::uint64_t>(offered[static_cast<std::size_t>(p)]) << 32) +
          have[static_cast<std::size_t>(p)];
      if (score < best_score) {
        best_score = score;
        best = p;
        ties = 1;
      } else if (score == best_score && !in_order &&
                 std::uniform_int_distribution<int>(0, ties++)(rng) == 0) {
        best = p;
      }
    }
    return best;
  }
};

// One connection of an origin torrent. Peers whose peer id says they understand Shoal super
// seeding (they ignore our have-all) are offered pieces with HAVE messages: a few at first, and
// one more each time they report an offered piece complete. Other peers see a plain seed.
//
// Only first copies are offered while the node is trading with other nodes: a piece some
// connected node holds (or has on offer) is offered again only to a node that completed no piece
// of another node's for `duplicate_after` (one that has no other peers, or whose peers lack what
// it needs). Every second copy the origin sends takes the origin's link, the swarm's bottleneck,
// from a first copy: with second copies offered freely the origin sent 1.12 copies to 4 nodes and
// 1.53 to 32, and the fan-out took as long as those bytes need on its link (docs/p2p.md).
class superseed_peer final : public lt::peer_plugin {
 public:
  superseed_peer(std::shared_ptr<superseed_state> st, lt::peer_connection_handle h)
      : st_(std::move(st)),
        h_(std::move(h)),
        has_(static_cast<std::size_t>(st_->pieces), false),
        announced_(static_cast<std::size_t>(st_->pieces), false) {}

  // Says "I super-seed this torrent" before the bitfield (libtorrent writes the extension
  // handshake first), for nodes that cannot tell from our peer id.
  void add_handshake(lt::entry& e) override { e[superseed_handshake_key] = 1; }

  ~superseed_peer() override {
    if (enabled_) --st_->nodes;
    for (int p = 0; p < st_->pieces; ++p) {
      if (has_[static_cast<std::size_t>(p)]) --st_->have[static_cast<std::size_t>(p)];
    }
    for (const auto& o : offers_) st_->release(o.piece);
  }

  bool on_have_none() override {
    start();
    return false;
  }
  bool on_have_all() override {
    for (int p = 0; p < st_->pieces; ++p) mark(p);
    return false;
  }
  bool on_bitfield(lt::bitfield const& bits) override {
    for (int p = 0; p < std::min(st_->pieces, bits.size()); ++p) {
      if (bits.get_bit(p)) mark(p);
    }
    start();
    return false;
  }
  bool on_have(lt::piece_index_t piece) override {
    int p = static_cast<int>(piece);
    if (p < 0 || p >= st_->pieces) return false;
    mark(p);
    auto it = std::find_if(offers_.begin(), offers_.end(),
                           [p](const offer_t& o) { return o.piece == p; });
    if (it != offers_.end()) {
      offers_.erase(it);
      st_->release(p);
      offer();
    } else {
      last_peer_piece_ = std::chrono::steady_clock::now();  // not ours: from another node
    }
    return false;
  }
  // An offer the node asked for is taken up: it may wait long in our upload queue (tick()).
  // Payload sent twice: to this node again (it asked twice for a block, as after a request timed
  // out) or to another node (a second copy). Counted as the blocks are queued for sending.
  void sent_piece(lt::peer_request const& r) override {
    int p = static_cast<int>(r.piece);
    if (p < 0 || p >= st_->pieces || r.length <= 0 || r.start < 0) return;
    auto here = sent_here_[p].add(r);
    auto all = st_->sent[static_cast<std::size_t>(p)].add(r);
    st_->counters->repeat_bytes_same_node += here;
    if (all > here) st_->counters->repeat_bytes_other_node += all - here;
  }
  bool on_request(lt::peer_request const& r) override {
    for (auto& o : offers_) {
      if (o.piece == static_cast<int>(r.piece)) o.requested = true;
    }
    return false;
  }
  // Retries when nothing was left to offer, frees the slots of offers the peer has not asked
  // for within offer_expiry (it may not want the piece: a dataset node skips files it already
  // holds, and its bitfield does not show them), and starts peers that sent no bitfield at all.
  // An unasked offer expires only while the node asks for none of its offers: towards a busy
  // origin a node keeps a few blocks in its queue and works through several offers one after
  // the other, so the later ones wait their turn without being unwanted (expiring them sent their
  // pieces twice: to another node, and later to this one, which had been offered them for good).
  // An offer asked for lasts requested_expiry instead: on a busy origin link its blocks can wait
  // far longer than offer_expiry, and offering the piece again elsewhere would send it twice; the
  // longer bound only frees the slot of a node that asked and then lost interest.
  void tick() override {
    if (started_) {
      auto now = std::chrono::steady_clock::now();
      const bool asking =
          std::any_of(offers_.begin(), offers_.end(), [](const offer_t& o) { return o.requested; });
      std::erase_if(offers_, [&](const offer_t& o) {
        if (o.requested ? now - o.at < requested_expiry : (asking || now - o.at < offer_expiry))
          return false;
        st_->release(o.piece);
        ++(o.requested ? st_->counters->offers_expired_requested : st_->counters->offers_expired);
        return true;
      });
      offer();
    } else if (!h_.in_handshake()) {
      start();
    }
  }

 private:
  void mark(int p) {
    if (has_[static_cast<std::size_t>(p)]) return;
    has_[static_cast<std::size_t>(p)] = true;
    ++st_->have[static_cast<std::size_t>(p)];
  }

  void start() {
    if (started_ || h_.in_handshake()) return;
    started_ = true;
    enabled_ = has_prefix(h_.pid(), superseed_node_fingerprint);
    if (enabled_) ++st_->nodes;
    offer();
  }

  void offer() {
    if (!enabled_ || h_.is_disconnecting()) return;
    const int limit = std::max(1, st_->offers_per_peer / std::max(1, st_->nodes));
    bool made = false;
    while (static_cast<int>(offers_.size()) < limit && st_->in_flight < st_->max_in_flight) {
      int p = st_->pick(has_, announced_);
      if (p < 0) break;
      // pick() prefers first copies: this is a second one. Only to a node short of other sources.
      const bool first = st_->first_copy(p);
      if (!first && std::chrono::steady_clock::now() - last_peer_piece_ < duplicate_after) break;
      ++(first ? st_->counters->offers_first : st_->counters->offers_second);
      // Announced for good: the peer may request it from us whenever it likes.
      announced_[static_cast<std::size_t>(p)] = true;
      offers_.push_back(offer_t{p, std::chrono::steady_clock::now(), false});
      st_->hold(p);
      send_have(p);
      made = true;
    }
    if (made) kick();
  }

  // libtorrent asks a peer for blocks when it becomes interested in it, is unchoked by it or gets
  // a block from it, not on a HAVE from a peer it is interested in already (an earlier offer it
  // has not completed). Such a node sat on a new offer until it expired unasked, and its piece
  // went out twice (docs/p2p.md, "Offers that expired"). An UNCHOKE again (we unchoke every node;
  // libtorrent takes a repeated one as it comes) makes it pick among what we offered.
  void kick() {
    if (h_.is_choked()) return;
    char msg[5] = {0, 0, 0, 1, 1};  // UNCHOKE: length 1, id 1
    h_.send_buffer(msg, sizeof msg);
  }

  void send_have(int p) {
    // HAVE: length 5, id 4, piece index (big endian).
    char msg[9] = {0, 0, 0, 5, 4};
    for (int k = 0; k < 4; ++k)
      msg[5 + k] = static_cast<char>((static_cast<std::uint32_t>(p) >> (24 - 8 * k)) & 0xff);
    h_.send_buffer(msg, sizeof msg);
  }

  std::shared_ptr<superseed_state> st_;
  lt::peer_connection_handle h_;
  struct offer_t {
    int piece;
    std::chrono::steady_clock::time_point at;
    bool requested = false;  // the node asked for a block of it
  };
  static constexpr std::chrono::seconds offer_expiry{5};
  static constexpr std::chrono::seconds requested_expiry{120};
  static constexpr std::chrono::seconds duplicate_after{2};
  // When the node last reported a piece we had not offered it (one from another node); the
  // connection's start before that.
  std::chrono::steady_clock::time_point last_peer_piece_ = std::chrono::steady_clock::now();
  std::vector<bool> has_;
  std::vector<bool> announced_;  // offered to this peer once (a HAVE was sent)
  std::vector<offer_t> offers_;
  std::unordered_map<int, sent_span> sent_here_;  // pieces sent on this connection
  bool started_ = false;
  bool enabled_ = false;
};

class superseed_torrent final : public lt::torrent_plugin {
 public:
  explicit superseed_torrent(std::shared_ptr<superseed_state> st) : st_(std::move(st)) {}
  std::shared_ptr<lt::peer_plugin> new_connection(lt::peer_connection_handle const& pc) override {
    if (pc.type() != lt::connection_type::bittorrent) return nullptr;
    return std::make_shared<superseed_peer>(st_, pc);
  }

 private:
  std::shared_ptr<superseed_state> st_;
};

class origin_superseed final : public lt::plugin {
 public:
  origin_superseed(int offers, bool in_order, int max_in_flight,
                   std::shared_ptr<superseed_counters> counters)
      : offers_(offers),
        in_order_(in_order),
        max_in_flight_(max_in_flight),
        counters_(std::move(counters)) {}
  std::shared_ptr<lt::torrent_plugin> new_torrent(lt::torrent_handle const&,
                                                  lt::client_data_t ud) override {
    auto* tag = ud.get<superseed_tag>();
    auto pieces = reinterpret_cast<std::uintptr_t>(tag);
    if (pieces == 0 || pieces > (1u << 24)) return nullptr;
    return std::make_shared<superseed_torrent>(std::make_shared<superseed_state>(
        static_cast<int>(pieces), offers_, in_order_, max_in_flight_, counters_));
  }

 private:
  int offers_;
  bool in_order_;
  int max_in_flight_;
  std::shared_ptr<superseed_counters> counters_;
};

// Node side: an origin that super-seeds claims every piece in its bitfield; the node ignores that
// claim and learns what to request from the origin's HAVE offers only.
struct node_torrent_ctx {
  lt::torrent_handle th;
  block_callback on_block;
};

class node_superseed_peer final : public lt::peer_plugin {
 public:
  node_superseed_peer(std::shared_ptr<const node_torrent_ctx> ctx, lt::peer_connection_handle h)
      : ctx_(std::move(ctx)), h_(std::move(h)) {}
  bool on_extension_handshake(lt::bdecode_node const& h) override {
    if (h.type() == lt::bdecode_node::dict_t &&
        h.dict_find_int_value(superseed_handshake_key, 0) == 1)
      announced_superseeder_ = true;
    return true;  // false would detach the plugin from the connection
  }
  bool on_have_all() override { return from_superseeding_origin(); }
  bool on_bitfield(lt::bitfield const&) override { return from_superseeding_origin(); }
  bool on_piece(lt::peer_request const&, lt::span<char const> buf) override {
    if (ctx_->on_block) {
      // The peer id is known once the handshake is done, before any block arrives.
      if (origin_ < 0) origin_ = is_origin(h_.pid()) ? 1 : 0;
      ctx_->on_block(ctx_->th, origin_ == 1, static_cast<std::size_t>(buf.size()));
    }
    return false;
  }

 private:
  bool from_superseeding_origin() const {
    return announced_superseeder_ || has_prefix(h_.pid(), superseeding_origin_fingerprint);
  }
  std::shared_ptr<const node_torrent_ctx> ctx_;
  lt::peer_connection_handle h_;
  int origin_ = -1;
  bool announced_superseeder_ = false;  // its extension handshake said so (a publishing node)
};

class node_superseed_torrent final : public lt::torrent_plugin {
 public:
  explicit node_superseed_torrent(std::shared_ptr<const node_torrent_ctx> ctx)
      : ctx_(std::move(ctx)) {}
  std::shared_ptr<lt::peer_plugin> new_connection(lt::peer_connection_handle const& pc) override {
    if (pc.type() != lt::connection_type::bittorrent) return nullptr;
    return std::make_shared<node_superseed_peer>(ctx_, pc);
  }

 private:
  std::shared_ptr<const node_torrent_ctx> ctx_;
};

class node_superseed final : public lt::plugin {
 public:
  explicit node_superseed(block_callback cb) : on_block_(std::move(cb)) {}
  std::shared_ptr<lt::torrent_plugin> new_torrent(lt::torrent_handle const& th,
                                                  lt::client_data_t) override {
    return std::make_shared<node_superseed_torrent>(
        std::make_shared<node_torrent_ctx>(node_torrent_ctx{th, on_block_}));
  }

 private:
  block_callback on_block_;
};

}  // namespace

std::shared_ptr<lt::plugin> origin_superseed_plugin(int offers_per_peer, bool in_order,
                                                    int max_in_flight,
                                                    std::shared_ptr<superseed_counters> counters) {
  return std::make_shared<origin_superseed>(std::max(1, offers_per_peer), in_order,
                                            std::max(1, max_in_flight), std::move(counters));
}

// Every torrent of a super-seeding origin must carry it: nodes ignore such an origin's bitfield
// for every torrent, so a torrent without offers would give them nothing.
lt::client_data_t superseed_userdata(int pieces) {
  return lt::client_data_t(reinterpret_cast<superseed_tag*>(static_cast<std::uintptr_t>(pieces)));
}

std::shared_ptr<lt::plugin> node_superseed_plugin(block_callback on_block) {
  return std::make_shared<node_superseed>(std::move(on_block));
}

bool is_origin(const lt::peer_id& pid) {
  return has_prefix(pid, origin_fingerprint) || has_prefix(pid, superseeding_origin_fingerprint);
}

}  // namespace shoal::swarm

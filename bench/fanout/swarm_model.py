"""A fan-out model of Shoal's swarm, fitted to bench/fanout/run --scale and run to 1,000 nodes.

The swarm part is a round-based piece simulation (the classic model of BitTorrent with equal
upload and download capacity): the blob is P pieces; in one round every peer can receive one piece
and send one, and the seed (registry-proxy) sends one piece's worth. The seed super-seeds as
registry-proxy's origin plugin does (swarm/src/swarm.cc, superseed_peer): every node holds
max(1, K // N) offers at once (K: `torrent.superseed_offers`, 8), at most M on all nodes together
(`torrent.superseed_max_in_flight`, 64), pieces no node holds or has on offer first, a second copy only to a node that got nothing from the other nodes for
`duplicate_after` (2 s); its link sends every offer in flight side by side, so with k offers in
flight each arrives k rounds after it was made. From 8 nodes on k = N: the last N first copies
arrive together at the end and must spread from there, which grows with N (without it, the
simulated seed sending whole pieces one after the other, the fit missed the 32-node point by
11-12 %). Every node knows the seed and
up to 50 other nodes (libtorrent's connection limit is larger; 50 is what a tracker answer gives),
asks for the rarest piece it lacks among what its free neighbours hold, and is served by one of
them. R(N) rounds fill all N nodes; the lower bound is P (one link's worth).

Measured time = what the simulation cannot know, fitted by least squares to the measured points
(with L >= 0, a >= 0 and e <= 1; when the free fit breaks one, the best fit with L or a at 0):

    T(N) = L + a × log2(N) + (R(N) / P) × (S/B) / e

L: the start (peerd asks registry-proxy for the metainfo, joins the swarm, announces to the
tracker, connects); a × log2(N): start-up work that grows with the swarm (tracker answers and
connections to more peers, the time until every node has peers with pieces); e: the share of the
link rate that carries payload (TCP/IP and BitTorrent framing, tbf's bucket, CPU). Linear in
(L, a, 1/e), so the fit is plain arithmetic with no library.

fit_and_check() fits the three to the measured points, gives each point's relative error, the
same with each point left out of the fit (the honest test with 4 points and 3 parameters), and
the prediction for 2..1,000 nodes as last node ÷ S/B.
"""
from __future__ import annotations

import math
import random
from typing import Any

MAX_NEIGHBOURS = 50
SIM_PIECES = 256  # pieces of the simulation at most (a blob of more: scale in simulate_rounds)
SUPERSEED_OFFERS = 8  # registry-proxy's torrent.superseed_offers default
MAX_IN_FLIGHT = 64  # registry-proxy's torrent.superseed_max_in_flight default
DUPLICATE_AFTER_S = 2.0  # swarm/src/swarm.cc superseed_peer::duplicate_after


def piece_size_for(size: int) -> int:
    """swarm/src/metainfo.cc's piece_size_for: size/1024 rounded up to a power of two, 64 KiB..4 MiB."""
    p, target = 64 * 1024, size // 1024
    while p < target and p < 4 * 1024 * 1024:
        p <<= 1
    return p


def simulate_rounds(n: int, pieces: int, seed: int = 1, offers: int | None = None,
                    dup_rounds: int = 1, scale: float = 1.0, max_in_flight: int = MAX_IN_FLIGHT) -> int:
    """Rounds until all n nodes hold all `pieces` (one piece per node and round each way; the seed
    sends one piece's worth per round, super-seeding).

    offers=None: the seed sends whole pieces one after the other, to one node per round.
    offers=K: as registry-proxy's origin plugin does (swarm/src/swarm.cc, superseed_peer with
    `torrent.superseed_offers` K): every node holds max(1, K // n) offers at once and all nodes
    together at most max_in_flight (`torrent.superseed_max_in_flight`), first copies
    (a piece nobody holds or has on offer) while any are left, a second copy only to a node that
    got no piece from the other nodes for `dup_rounds` rounds (`duplicate_after`); the seed's link
    sends every offer in flight side by side, so each gets 1/k of the round with k offers in
    flight, and a piece reaches its node only when all of it has. `scale`: real pieces per
    simulated piece (a blob of more pieces than the simulation keeps): the offers in flight are
    then at most max(1, round(min(n × max(1, K // n), max_in_flight) / scale)), the same bytes in
    flight."""
    rng = random.Random(seed * 1000003 + n)
    full = (1 << pieces) - 1
    have = [0] * n
    copies = [0] * pieces
    neigh = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        neigh.append(rng.sample(others, min(MAX_NEIGHBOURS, len(others))))
    seed_st = _InFlight(n, pieces, offers, dup_rounds, scale, max_in_flight) if offers else None
    rounds = 0
    while any(h != full for h in have):
        rounds += 1
        if rounds > 100 * pieces + 1000:
            raise RuntimeError("simulation did not converge")
        busy_up = [False] * n
        seed_busy = False
        got = seed_st.round(rounds, have, copies, rng) if seed_st else []
        order = [i for i in range(n) if have[i] != full]
        rng.shuffle(order)
        for i in order:
            need = full & ~have[i]
            # The rarest piece among what free neighbours hold, from one of them.
            avail = 0
            for j in neigh[i]:
                if not busy_up[j]:
                    avail |= have[j]
            avail &= need
            if avail:
                if seed_st:
                    seed_st.last_peer[i] = rounds
                k = _rarest(avail, copies)
                for j in neigh[i]:
                    if not busy_up[j] and (have[j] >> k) & 1:
                        busy_up[j] = True
                        break
                got.append((i, k))
            elif not seed_st and not seed_busy:
                # The seed offers what no node holds first (super seeding), fewest copies first.
                seed_busy = True
                got.append((i, _rarest(need, copies)))
        for i, k in got:
            if not (have[i] >> k) & 1:
                have[i] |= 1 << k
                copies[k] += 1
    return rounds


class _InFlight:
    """The seed's offers in flight (simulate_rounds with offers=K)."""

    def __init__(self, n: int, pieces: int, offers: int, dup_rounds: int, scale: float,
                 max_in_flight: int = MAX_IN_FLIGHT):
        self.n, self.pieces, self.dup_rounds = n, pieces, dup_rounds
        self.per_node = max(1, offers // n)
        self.cap = max(1, round(min(n * self.per_node, max_in_flight) / scale))
        self.flight: list[dict[int, float]] = [{} for _ in range(n)]  # piece -> share received
        self.on_offer = [0] * pieces
        self.last_peer = [0] * n  # the round node i last got a piece from another node

    def round(self, now: int, have: list[int], copies: list[int],
              rng: random.Random) -> list[tuple[int, int]]:
        """Refills the nodes' offers, sends 1/k of a piece on each of the k in flight, returns the
        pieces that arrived whole as (node, piece)."""
        on_offer, flight = self.on_offer, self.flight
        first = [p for p in range(self.pieces) if copies[p] == 0 and on_offer[p] == 0]
        rng.shuffle(first)
        order = sorted(range(self.pieces), key=lambda p: (on_offer[p], copies[p]))
        total = 0
        for f in flight:
            total += len(f)
        nodes = list(range(self.n))
        rng.shuffle(nodes)
        for i in nodes:
            f = flight[i]
            for p in [p for p in f if (have[i] >> p) & 1]:  # got it elsewhere: its HAVE frees it
                del f[p]
                on_offer[p] -= 1
                total -= 1
            while len(f) < self.per_node and total < self.cap:
                if first:
                    p = first.pop()
                elif now - self.last_peer[i] >= self.dup_rounds:
                    p = next((q for q in order if not (have[i] >> q) & 1 and q not in f), -1)
                    if p < 0:
                        break
                else:
                    break  # a second copy only for a node short of other sources
                f[p] = 0.0
                on_offer[p] += 1
                total += 1
        arrived = []
        if total:
            share = 1.0 / total
            for i, f in enumerate(flight):
                for p in list(f):
                    f[p] += share
                    if f[p] >= 1.0 - 1e-9:
                        del f[p]
                        on_offer[p] -= 1
                        arrived.append((i, p))
        return arrived


def _rarest(mask: int, copies: list[int]) -> int:
    best, best_c = -1, None
    k = 0
    while mask:
        if mask & 1 and (best_c is None or copies[k] < best_c):
            best, best_c = k, copies[k]
            if best_c == 0:
                break
        mask >>= 1
        k += 1
    return best


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination of a k×k system; None when singular."""
    k = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-12:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [m[r][j] - f * m[c][j] for j in range(k + 1)]
    return [m[i][k] / m[i][i] for i in range(k)]


# Which of (L, a, 1/e) a fit may use: all three, or with a = 0, or L = 0, or both.
_SUBSETS = ((0, 1, 2), (0, 2), (1, 2), (2,))


def _fit(rows: list[tuple[float, float, float]]) -> list[float] | None:
    """Least squares of t = L + a·x1 + g·x2 over rows (x1, x2, t) with the physical bounds L >= 0,
    a >= 0, g >= 1 (payload share e = 1/g at most 1): the unconstrained fit when it keeps them,
    else the best fit with L and/or a held at 0."""
    best, best_sse = None, None
    for sub in _SUBSETS:
        if len(rows) < len(sub):
            continue
        xs = [[(1.0, x1, x2)[i] for i in sub] for x1, x2, _ in rows]
        ata = [[sum(x[i] * x[j] for x in xs) for j in range(len(sub))] for i in range(len(sub))]
        atb = [sum(x[i] * r[2] for x, r in zip(xs, rows)) for i in range(len(sub))]
        sol = _solve(ata, atb)
        if sol is None:
            continue
        coef = [0.0, 0.0, 0.0]
        for i, v in zip(sub, sol):
            coef[i] = v
        if coef[0] < 0 or coef[1] < 0 or coef[2] < 1:
            continue
        sse = sum((coef[0] + coef[1] * x1 + coef[2] * x2 - t) ** 2 for x1, x2, t in rows)
        if best_sse is None or sse < best_sse - 1e-12:
            best, best_sse = coef, sse
        if sub == (0, 1, 2):
            break  # the unconstrained fit is valid: nothing constrained fits better
    return best


def fit_and_check(points: list[tuple[int, float]], *, size: int, piece: int, rate_bps: float,
                  predict: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1000),
                  offers: int | None = SUPERSEED_OFFERS,
                  duplicate_after_s: float = DUPLICATE_AFTER_S,
                  max_in_flight: int = MAX_IN_FLIGHT) -> dict[str, Any]:
    """points: (nodes, measured last-node seconds). offers: registry-proxy's
    `torrent.superseed_offers` (None: the seed sends whole pieces one after the other);
    max_in_flight: its `torrent.superseed_max_in_flight`."""
    if len(points) < 3:
        return {"summary": "fewer than 3 points: no fit"}
    sb = size * 8 / rate_bps
    real_pieces = max(1, -(-size // piece))
    sim_pieces = min(SIM_PIECES, real_pieces)
    # A round is one piece's time on a link: duplicate_after in rounds.
    dup_rounds = max(1, math.ceil(duplicate_after_s / (piece * 8 / rate_bps)))
    cache: dict[int, float] = {}

    def swarm_s(n: int) -> float:
        """(R(N)/P) × S/B: the swarm's own time at full payload rate."""
        if n not in cache:
            runs = 3 if n <= 64 else 1
            r = sum(simulate_rounds(n, sim_pieces, seed=s, offers=offers, dup_rounds=dup_rounds,
                                    scale=real_pieces / sim_pieces, max_in_flight=max_in_flight)
                    for s in range(1, runs + 1)) / runs
            cache[n] = r / sim_pieces * sb
        return cache[n]

    rows = [(math.log2(n), swarm_s(n), t) for n, t in points]
    coef = _fit(rows)
    if coef is None:
        return {"summary": "the fit is singular (need 3 distinct node counts)"}
    big_l, a, g = coef

    def model(c: list[float], n: int) -> float:
        return c[0] + c[1] * math.log2(n) + c[2] * swarm_s(n)

    errors = [abs(model(coef, n) - t) / t for n, t in points]
    left_out = []
    for k in range(len(points)):
        rest = [r for i, r in enumerate(rows) if i != k]
        c = _fit(rest) if len(rest) >= 2 else None
        n, t = points[k]
        left_out.append(abs(model(c, n) - t) / t if c else None)
    lo = [e for e in left_out if e is not None]
    pred = {str(n): round(model(coef, n) / sb, 3) for n in predict}
    out = {
        "form": "T(N) = L + a*log2(N) + (R(N)/P)*(S/B)/e, R(N) from a round-based piece simulation"
                + (f" whose seed sends its offers in flight side by side (superseed_offers {offers}, "
                   f"at most {max_in_flight} in flight)" if offers
                   else " whose seed sends one piece after the other"),
        "sim_pieces": sim_pieces, "real_pieces": real_pieces, "max_neighbours": MAX_NEIGHBOURS,
        "superseed_offers": offers, "superseed_max_in_flight": max_in_flight,
        "duplicate_after_rounds": dup_rounds,
        "L_s": round(big_l, 3), "a_s": round(a, 3), "payload_share_e": round(1 / g, 3) if g else None,
        "sim_rounds_over_p": {str(n): round(swarm_s(n) / sb, 4) for n in sorted({p[0] for p in points} | set(predict))},
        "rel_error": {str(n): round(e, 4) for (n, _), e in zip(points, errors)},
        "rel_error_left_out": {str(n): (round(e, 4) if e is not None else None)
                               for (n, _), e in zip(points, left_out)},
        "max_rel_error": max(errors),
        "max_rel_error_left_out": max(lo) if len(lo) == len(points) else None,
        "predicted_last_over_sb": pred,
    }
    out["summary"] = (f"L {big_l:.2f} s, a {a:.3f} s per doubling, payload share {out['payload_share_e']}; "
                      f"max error {out['max_rel_error']:.1%} fitted, "
                      + (f"{out['max_rel_error_left_out']:.1%} left out" if out["max_rel_error_left_out"] is not None
                         else "left-out n/a")
                      + f"; predicted last/(S/B) at 1,000 nodes {pred.get('1000')}")
    return out

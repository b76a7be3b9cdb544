"""A fan-out model of Shoal's swarm, fitted to bench/fanout/run --scale and run to 1,000 nodes.

The swarm part is a round-based piece simulation (the classic model of BitTorrent with equal
upload and download capacity): the blob is P pieces; in one round every peer can receive one piece
and send one, and the seed (registry-proxy) sends one. The seed super-seeds, as registry-proxy
does: it offers the pieces no node holds yet, fewest copies first. Every node knows the seed and
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
SIM_PIECES = 128  # virtual pieces of the simulation (the real blob may have more; see below)


def piece_size_for(size: int) -> int:
    """swarm/src/metainfo.cc's piece_size_for: size/1024 rounded up to a power of two, 64 KiB..4 MiB."""
    p, target = 64 * 1024, size // 1024
    while p < target and p < 4 * 1024 * 1024:
        p <<= 1
    return p


def simulate_rounds(n: int, pieces: int, seed: int = 1) -> int:
    """Rounds until all n nodes hold all `pieces` (one piece per node and round each way; the seed
    sends one per round, super-seeding)."""
    rng = random.Random(seed * 1000003 + n)
    full = (1 << pieces) - 1
    have = [0] * n
    copies = [0] * pieces
    neigh = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        neigh.append(rng.sample(others, min(MAX_NEIGHBOURS, len(others))))
    rounds = 0
    while any(h != full for h in have):
        rounds += 1
        if rounds > 100 * pieces + 1000:
            raise RuntimeError("simulation did not converge")
        busy_up = [False] * n
        seed_busy = False
        got = []
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
                k = _rarest(avail, copies)
                for j in neigh[i]:
                    if not busy_up[j] and (have[j] >> k) & 1:
                        busy_up[j] = True
                        break
                got.append((i, k))
            elif not seed_busy:
                # The seed offers what no node holds first (super seeding), fewest copies first.
                seed_busy = True
                got.append((i, _rarest(need, copies)))
        for i, k in got:
            if not (have[i] >> k) & 1:
                have[i] |= 1 << k
                copies[k] += 1
    return rounds


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
                  predict: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)) -> dict[str, Any]:
    """points: (nodes, measured last-node seconds)."""
    if len(points) < 3:
        return {"summary": "fewer than 3 points: no fit"}
    sb = size * 8 / rate_bps
    sim_pieces = min(SIM_PIECES, max(1, size // piece))
    cache: dict[int, float] = {}

    def swarm_s(n: int) -> float:
        """(R(N)/P) × S/B: the swarm's own time at full payload rate."""
        if n not in cache:
            runs = 3 if n <= 64 else 1
            r = sum(simulate_rounds(n, sim_pieces, seed=s) for s in range(1, runs + 1)) / runs
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
        "form": "T(N) = L + a*log2(N) + (R(N)/P)*(S/B)/e, R(N) from a round-based piece simulation",
        "sim_pieces": sim_pieces, "real_pieces": max(1, size // piece), "max_neighbours": MAX_NEIGHBOURS,
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

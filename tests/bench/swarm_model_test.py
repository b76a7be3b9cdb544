"""bench/fanout/swarm_model.py: the round simulation's bounds, and the fit recovering known
parameters (free, and with the physical bounds holding a parameter at zero)."""
import math
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "fanout"))
import swarm_model  # noqa: E402

MIB = 1 << 20


class SwarmModelTest(unittest.TestCase):
    def test_piece_size_follows_metainfo(self):
        self.assertEqual(swarm_model.piece_size_for(8 * MIB), 64 * 1024)
        self.assertEqual(swarm_model.piece_size_for(256 * MIB), 256 * 1024)
        self.assertEqual(swarm_model.piece_size_for(64 << 30), 4 * MIB)

    def test_rounds_are_at_least_the_pieces_and_near_them(self):
        for n in (1, 2, 5, 40):
            r = swarm_model.simulate_rounds(n, 32)
            # Every piece leaves the one seed at least once; then it spreads in a few rounds.
            self.assertGreaterEqual(r, 32, n)
            self.assertLessEqual(r, 32 + 4 * math.ceil(math.log2(n + 1)) + 8, n)
        self.assertEqual(swarm_model.simulate_rounds(1, 16), 16)

    def test_offers_in_flight_side_by_side_delay_the_last_pieces(self):
        # registry-proxy's seed sends every offer in flight side by side. A lone node holds all 8
        # offers: 8 pieces arrive together every 8 rounds, its link still full.
        self.assertEqual(swarm_model.simulate_rounds(1, 16, offers=8), 16)
        # 32 nodes hold one offer each: 32 pieces in flight, each arrives 32 rounds after its
        # offer, and the last ones spread only then. The serial seed does not grow so.
        r4 = swarm_model.simulate_rounds(4, 64, offers=8, dup_rounds=10)
        r32 = swarm_model.simulate_rounds(32, 64, offers=8, dup_rounds=10)
        serial32 = swarm_model.simulate_rounds(32, 64)
        self.assertLessEqual(r4, 64 + 12)
        self.assertGreaterEqual(r32, 64 + 24)
        self.assertGreater(r32, serial32 + 12)
        # The same bytes in flight when a simulated piece stands for 4 real ones: 8 in flight.
        self.assertLess(swarm_model.simulate_rounds(32, 64, offers=8, dup_rounds=10, scale=4), r32 - 10)

    def test_a_bound_on_offers_in_flight_keeps_many_nodes_from_all_waiting(self):
        # 96 nodes, 32 pieces: one offer per node puts every piece on offer at once (second copies
        # too, everyone short of sources) and none arrives before 96 rounds; with at most 16 in
        # flight the first copies arrive 16 rounds after their offer and spread from there. At or
        # below the bound nothing changes.
        unbounded = swarm_model.simulate_rounds(96, 32, offers=8, dup_rounds=10, max_in_flight=4096)
        bounded = swarm_model.simulate_rounds(96, 32, offers=8, dup_rounds=10, max_in_flight=16)
        self.assertGreaterEqual(unbounded, 96)
        self.assertLess(bounded, unbounded * 0.75)
        self.assertEqual(swarm_model.simulate_rounds(16, 32, offers=8, dup_rounds=10, max_in_flight=16),
                         swarm_model.simulate_rounds(16, 32, offers=8, dup_rounds=10, max_in_flight=4096))

    offers = None  # the serial seed: the fit's arithmetic is the same, the simulation faster

    def fit(self, big_l, a, e, counts=(4, 8, 16, 32)):
        size, rate = 16 * MIB, 100e6
        probe = swarm_model.fit_and_check([(n, 10.0 + n) for n in counts], size=size, piece=65536,
                                          rate_bps=rate, predict=(4,), offers=self.offers)
        sb = size * 8 / rate
        swarm = {int(n): v * sb for n, v in probe["sim_rounds_over_p"].items()}
        pts = [(n, big_l + a * math.log2(n) + swarm[n] / e) for n in counts]
        return swarm_model.fit_and_check(pts, size=size, piece=65536, rate_bps=rate, predict=(4, 1000),
                                         offers=self.offers)

    def test_fit_recovers_known_parameters(self):
        r = self.fit(1.5, 0.2, 0.8)
        self.assertAlmostEqual(r["L_s"], 1.5, delta=0.02)
        self.assertAlmostEqual(r["a_s"], 0.2, delta=0.02)
        self.assertAlmostEqual(r["payload_share_e"], 0.8, places=2)
        # (The probe's swarm times are rounded to 4 digits: not exact.)
        self.assertLess(r["max_rel_error"], 1e-3)
        self.assertLess(r["max_rel_error_left_out"], 1e-3)
        self.assertIn("1000", r["predicted_last_over_sb"])

    def test_fit_with_the_seeds_offers_in_flight(self):
        # The default simulation (registry-proxy's 8 offers) fits the same way; 2 points of 3
        # parameters plus the one left out.
        r = swarm_model.fit_and_check([(4, 60.0), (8, 61.0), (16, 63.0)], size=16 * MIB, piece=65536,
                                      rate_bps=2.5e6, predict=(4,))
        self.assertEqual(r["superseed_offers"], 8)
        self.assertEqual(r["superseed_max_in_flight"], 64)
        self.assertEqual(r["duplicate_after_rounds"], 10)
        self.assertLess(r["max_rel_error"], 0.05)

    def test_bounds_hold_a_parameter_at_zero(self):
        # Times that fall with N would need a < 0: the fit keeps a = 0 and stays physical.
        r = swarm_model.fit_and_check([(4, 12.0), (8, 11.5), (16, 11.2), (32, 11.0)], size=16 * MIB,
                                      piece=65536, rate_bps=100e6, predict=(4,))
        self.assertGreaterEqual(r["a_s"], 0)
        self.assertGreaterEqual(r["L_s"], 0)
        self.assertLessEqual(r["payload_share_e"], 1)

    def test_too_few_points_say_so(self):
        r = swarm_model.fit_and_check([(4, 1.0), (8, 1.1)], size=MIB, piece=65536, rate_bps=1e6)
        self.assertIn("fewer than 3", r["summary"])


if __name__ == "__main__":
    unittest.main()

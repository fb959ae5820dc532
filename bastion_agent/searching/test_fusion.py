"""Hybrid fusion follows how well each side's list separates: a flat list says little, a sharp one a lot."""

from __future__ import annotations

import random
import unittest
from unittest import mock

from bastion_agent.searching import fusion
from bastion_agent.searching.keyword import KeywordHit

DEPTH = 100


class AdaptiveWeightTests(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random()  # fresh each run
        self.floor = self.rng.uniform(0.0, 0.5)

    def vector_list(self, head: float, tail: float, prefix: str = "v") -> list[tuple[float, str]]:
        """``DEPTH`` windows whose evidence is about ``head`` for the first ten and ``tail`` after, best first."""
        evidence = [head - 0.001 * i for i in range(fusion.HEAD)] + [tail - 0.0001 * i for i in range(DEPTH - fusion.HEAD)]
        return [(self.floor + e * (1 - self.floor), f"{prefix}{i:03d}") for i, e in enumerate(evidence)]

    def keyword_list(self, head: float, tail: float, count: int = DEPTH, prefix: str = "k") -> list[KeywordHit]:
        evidence = [head - 0.001 * i for i in range(fusion.HEAD)] + [tail - 0.0001 * i for i in range(count - fusion.HEAD)]
        return [KeywordHit(f"{prefix}{i:03d}", 10 * e, e) for i, e in enumerate(evidence[:count])]

    def test_the_weight_moves_with_each_lists_separation_in_the_direction_adapt_says(self):
        sharp_vector, flat_vector = self.vector_list(0.8, 0.2), self.vector_list(0.31, 0.3)
        sharp_keyword, flat_keyword = self.keyword_list(0.9, 0.1), self.keyword_list(0.41, 0.4)
        low, high = fusion.WEIGHT_RANGE
        for adapt in (1.0, fusion.ADAPT):
            with self.subTest(adapt=adapt):
                vector_sharper = fusion.query_weight(sharp_vector, flat_keyword, self.floor, adapt=adapt)
                keyword_sharper = fusion.query_weight(flat_vector, sharp_keyword, self.floor, adapt=adapt)
                toward_sharper = adapt > 0
                self.assertEqual(vector_sharper > fusion.VECTOR_WEIGHT, toward_sharper)
                self.assertEqual(keyword_sharper < fusion.VECTOR_WEIGHT, toward_sharper)
                for weight in (vector_sharper, keyword_sharper):
                    self.assertTrue(low <= weight <= high)
        self.assertLess(fusion.ADAPT, 0)  # the default: the sharper side gives up a little (bench/search/quality.py)

    def test_equal_separation_keeps_the_prior_and_no_adaptation_is_the_fixed_weight(self):
        spread = self.rng.uniform(0.2, 0.6)
        vector, keyword = self.vector_list(0.2 + spread, 0.2), self.keyword_list(0.3 + spread, 0.3)
        self.assertAlmostEqual(fusion.query_weight(vector, keyword, self.floor), fusion.VECTOR_WEIGHT, places=2)
        lopsided = self.keyword_list(0.41, 0.4)
        self.assertEqual(fusion.query_weight(vector, lopsided, self.floor, adapt=0), fusion.VECTOR_WEIGHT)

    def test_a_side_with_no_list_leaves_the_prior(self):
        self.assertEqual(fusion.query_weight(self.vector_list(0.8, 0.2), [], self.floor), fusion.VECTOR_WEIGHT)
        self.assertEqual(fusion.query_weight([], self.keyword_list(0.8, 0.2), self.floor), fusion.VECTOR_WEIGHT)

    def test_a_short_keyword_list_of_rare_words_separates_well_and_cedes_weight_to_the_vector_side(self):
        """Five windows hold the query's rare words: the rest of the store has no keyword evidence at all."""
        rare = self.keyword_list(0.9, 0.0, count=5)
        self.assertGreater(fusion.separation([hit.evidence for hit in rare], DEPTH), 0.4)
        self.assertGreater(fusion.query_weight(self.vector_list(0.35, 0.3), rare, self.floor), fusion.VECTOR_WEIGHT)

    def test_the_vector_sides_best_window_gains_on_a_keyword_list_of_off_meaning_rare_word_matches(self):
        """The case that put hybrid below vector on a collection: sharp keyword matches the vector side ranks low."""
        vector = self.vector_list(0.6, 0.3)
        keyword = self.keyword_list(0.9, 0.1, prefix="v0")[10:] + self.keyword_list(0.95, 0.1, prefix="w")[:10]
        keyword.sort(key=lambda hit: -hit.evidence)
        others = {hit.chunk_id: self.floor for hit in keyword if hit.chunk_id.startswith("w")}
        adaptive = fusion.fuse(vector, keyword, others, self.floor, 20)
        fixed = fusion.fuse(vector, keyword, others, self.floor, 20, fusion.VECTOR_WEIGHT)
        rank = {name: [item.chunk_id for item in ranked].index("v000") for name, ranked in
                (("adaptive", adaptive), ("fixed", fixed))}
        self.assertLessEqual(rank["adaptive"], rank["fixed"])
        self.assertGreater(fusion.query_weight(vector, keyword, self.floor), fusion.VECTOR_WEIGHT)

    def test_relevance_never_rises_down_the_list_and_stays_a_percentage(self):
        for _ in range(20):
            vector = sorted(((self.rng.uniform(self.floor, 1.0), f"c{i}") for i in range(DEPTH)), reverse=True)
            hits = sorted((KeywordHit(f"c{self.rng.randrange(150)}", 0.0, self.rng.random()) for _ in range(40)),
                          key=lambda hit: -hit.evidence)
            unique = list({hit.chunk_id: hit for hit in hits}.values())
            fused = fusion.fuse(vector, unique, {}, self.floor, 30)
            relevance = [item.relevance for item in fused]
            self.assertEqual(relevance, sorted(relevance, reverse=True))
            self.assertTrue(all(0 <= value <= 100 for value in relevance))


if __name__ == "__main__":
    unittest.main()


class ScoredRecordTests(unittest.TestCase):
    """``fusion.scored`` fills a ``Scored``'s dict at once: it must make exactly the record ``Scored(...)`` makes."""

    def test_its_parameters_are_the_records_fields_in_order_with_their_defaults(self):
        import dataclasses
        import inspect

        fields = [(item.name, item.default) for item in dataclasses.fields(fusion.Scored)]
        parameters = [(name, inspect.Parameter.empty if item.default is inspect.Parameter.empty else item.default)
                      for name, item in inspect.signature(fusion.scored).parameters.items()]
        self.assertEqual(parameters, [(name, inspect.Parameter.empty if default is dataclasses.MISSING else default)
                                      for name, default in fields])
        self.assertFalse(hasattr(fusion.Scored, "__post_init__") or hasattr(fusion.Scored, "__slots__"))

    def test_the_record_is_equal_hashes_alike_and_stays_frozen(self):
        chance = random.Random()
        for _ in range(50):
            values = [chance.random(), f"{chance.getrandbits(256):064x}", chance.randrange(101)]
            values += [chance.choice([None, chance.random(), chance.randrange(1, 200)]) for _ in range(6)]
            made, reference = fusion.scored(*values), fusion.Scored(*values)
            self.assertIs(type(made), fusion.Scored)
            self.assertEqual((made, hash(made), repr(made)), (reference, hash(reference), repr(reference)))
            self.assertEqual(list(vars(made).items()), list(vars(reference).items()))
            with self.assertRaises(Exception):
                made.score = 0.0
        self.assertEqual(fusion.scored(1.0, "c", 5, keyword_rank=2), fusion.Scored(1.0, "c", 5, keyword_rank=2))

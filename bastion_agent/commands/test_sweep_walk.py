"""A sweep's walk through the house: the layout goes down the floors, and each listing is parsed once a stage.

The walk is recorded by ``testing/house_walk.py`` (a profile hook on a real
sweep in this process, against the stub model server); the counts are work
counts, not times. ``bench/house/walk.py`` prints the same walk on real text.
"""

import secrets
import unittest

from bastion_agent.config import manifest as manifests
from bastion_agent.core.layout import Layout
from bastion_agent.testing.house_walk import traced_sweep
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import TempFolder, clean_env, write_manifest

class SweepWalkTests(TempFolder, unittest.TestCase):
    def setUp(self):
        self.tmp = self.make_tmp()
        self.manifest_path = write_manifest(self.tmp, extra='\n[access]\ndefault = ["staff"]\n')
        for number in range(4):
            folder = self.tmp / "docs" / f"part-{number % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            words = " ".join(secrets.token_hex(3) for _ in range(60))
            (folder / f"note-{secrets.token_hex(3)}.txt").write_text(f"note {number}: {words}\n", encoding="utf-8")
        self.layout = Layout(self.tmp / "out")

    def walk(self):
        with StubServer(dim=64) as stub, clean_env(EMBED_URL=stub.url):
            return traced_sweep(manifests.load(self.manifest_path), self.layout)

    def test_the_layout_climbs_back_up_at_most_three_times_and_never_in_extract(self):
        walk = self.walk()
        self.assertTrue(walk.rooms)  # the hook saw the sweep: an empty walk would pass everything below
        self.assertEqual({stage for stage, _ in walk.rooms} - {"(before)"}, {"extract", "sanitize", "chunk", "embed"})
        self.assertLessEqual(walk.climb_count(), 3, walk.report()["climbs"])
        in_extract = [step for step in walk.steps_up if step[0] == "extract"]
        self.assertEqual(in_extract, [])
        in_embed = sum(times for (stage, _, _), times in walk.steps_up.items() if stage == "embed")
        self.assertLessEqual(in_embed, 2, walk.report()["climbs"])

    def test_each_json_lines_file_is_parsed_at_most_once_a_stage_and_the_listings_not_again(self):
        walk = self.walk()
        self.assertTrue(walk.parses)  # chunks.jsonl at least: embed reads what chunk wrote
        self.assertEqual(max(walk.parses.values()), 1, walk.report()["parses"])
        listings = {name for _, name in walk.parses if name.endswith("listing.jsonl")}
        self.assertEqual(listings, set())  # each stage is handed the records the one before wrote


if __name__ == "__main__":
    unittest.main()

"""Natural-text corpus of kvec_train: sources, held-out exclusion, cleaning, determinism."""

import json
import shutil
import unittest

from kvec_train import data


class TestCleaning(unittest.TestCase):
    def test_clean_text(self):
        raw = "\ufeffTitle\r\n\r\n\r\n\r\nA  line\twith   spaces  \rnext\u00a0word\n\n\n"
        self.assertEqual(data.clean_text(raw), "Title\n\nA line with spaces\nnext word\n")

    def test_ocr_fix(self):
        vocab = {"the", "there", "with", "that", "did", "die", "brooding"}
        fixed = data._fix_ocr_th("die sea and diere was widi diat. He did die. must die brooding", vocab)
        self.assertEqual(fixed, "the sea and there was with that. He did the. must die brooding")


@unittest.skipUnless(shutil.which("bible") and data.NPM.is_dir(), "corpus packages not installed")
class TestCorpus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = data.build_corpus()

    def test_sources_and_sizes(self):
        stats = data.corpus_stats(self.docs)
        self.assertEqual(stats["kjv"]["documents"], 66)
        self.assertEqual(stats["books"]["documents"], 2)
        self.assertGreater(stats["moby-dick"]["bytes"], 1_000_000)
        self.assertGreater(stats["sotu"]["bytes"], 5_000_000)
        self.assertTrue(all(d.text.strip() and d.licence for d in self.docs))
        names = {d.name for d in self.docs if d.source == "books"}
        self.assertEqual(names, {"books/heart-of-darkness", "books/the-phantom-of-the-opera"})
        genesis = next(d for d in self.docs if d.name == "kjv/Genesis")
        self.assertIn("In the beginning God created the heaven and the earth.", genesis.text)

    def test_heldout_addresses_never_train(self):
        listed = data.heldout_sotu_names()
        for d in self.docs:
            if d.source != "sotu":
                self.assertFalse(d.heldout)
                continue
            stem = d.name.split("/", 1)[1]
            year = int(stem[:4])
            self.assertEqual(d.heldout, year >= 2001 or (listed is not None and stem in listed), stem)
        if listed is not None:
            heldout = {d.name.split("/", 1)[1] for d in self.docs if d.heldout}
            self.assertTrue(listed <= heldout)
            spec = json.loads(data.HELDOUT_JSON.read_text())
            self.assertEqual(spec.get("min_year", 2001), data.DEFAULT_HELDOUT_FIRST_YEAR)

    def test_deterministic(self):
        again = data.load_sotu() + data.load_moby_dick()
        self.assertEqual(data.corpus_digest(again),
                         data.corpus_digest([d for d in self.docs if d.source in ("sotu", "moby-dick")]))

    def test_no_mojibake_or_control_characters(self):
        for d in self.docs:
            self.assertNotIn("\r", d.text, d.name)
            self.assertNotIn("\t", d.text, d.name)
            self.assertNotIn("\u00e2\u0080", d.text, d.name)


if __name__ == "__main__":
    unittest.main()

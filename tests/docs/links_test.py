"""The docs link only inside the repository, and every link resolves.

- every Markdown link in README.md and docs/**/*.md is relative (no http(s):, no other scheme);
- its target file exists; a `#fragment` names a heading of that file (GitHub's anchor rules:
  lower case, punctuation dropped, spaces to hyphens).
"""
from __future__ import annotations

import re
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(md: Path) -> set[str]:
    out = set()
    for line in FENCE.sub("", md.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


class DocLinks(unittest.TestCase):
    def test_links_stay_inside_and_resolve(self):
        problems, seen = [], 0
        for md in doc_files():
            text = FENCE.sub("", md.read_text())
            for target in LINK.findall(text):
                seen += 1
                where = f"{md.relative_to(ROOT)}: ({target})"
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    problems.append(f"{where}: links outside the repository")
                    continue
                path, _, frag = target.partition("#")
                dest = (md.parent / path).resolve() if path else md
                if not dest.exists():
                    problems.append(f"{where}: no such file")
                    continue
                if frag and dest.suffix == ".md" and frag not in anchors(dest):
                    problems.append(f"{where}: no heading #{frag} in {dest.relative_to(ROOT)}")
        self.assertGreater(seen, 10)
        self.assertEqual(problems, [])


if __name__ == "__main__":
    unittest.main()

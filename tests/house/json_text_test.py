"""House rule: no Shoal binary calls nlohmann's dump() itself; JSON text goes through
common/json_text.h, which writes U+FFFD for bytes that are not UTF-8 instead of throwing.

dump() throws type_error 316 on such a string (a registry's error cut in a character, a node's
netsetup text, a sysfs value), and on a pool, upkeep or resolver thread that exception ends the
process (a scheduler replica crashed this way on 2026-12-08's review: a netsetup error cut at 512
bytes reached the Redis upkeep thread inside a job record). Tests may call dump(): they build
their own documents.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DIRS = ("common", "cache", "swarm", "registry-proxy", "peerd", "scheduler", "netsetup", "tools")
ALLOWED = {Path("common/include/common/json_text.h")}
CALL = re.compile(r"(\.|->)dump\(")


def main(root: Path) -> int:
    bad = []
    for d in DIRS:
        for p in sorted((root / d).rglob("*")):
            if p.suffix not in (".cc", ".h") or p.relative_to(root) in ALLOWED:
                continue
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                code = line.split("//", 1)[0]
                if CALL.search(code):
                    bad.append(f"{p.relative_to(root)}:{n}: {line.strip()}")
    if bad:
        print("dump() called directly; use shoal::json_text (common/json_text.h):")
        print("\n".join(bad))
        return 1
    print(f"ok: no direct dump() in {', '.join(DIRS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

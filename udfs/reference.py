"""Write the signal-function reference (docs/functions.md) from the registry.

    python -m wavesql.udfs.reference [path]        # default: docs/functions.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from .registry import reference_markdown

DEFAULT = Path(__file__).resolve().parents[1] / "docs" / "functions.md"


def main(argv: list[str]) -> None:
    path = Path(argv[0]) if argv else DEFAULT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reference_markdown())
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])

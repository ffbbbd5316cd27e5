"""Write ``docs/openapi.json``, the OpenAPI document of the REST face, from the descriptors
xmc-ui serves it from (``ui.openapi``, ``ui.rest.SERVICES``).

Why checked in when xmc-ui serves it too: a reader (or a client generator) finds it in the
repository without running anything, and a change to the protos shows as a change to the
document in review. ``--check`` fails when the file is stale (``make proto-check``, and
``tests/unit/test_ui_openapi.py`` in every test run).

Usage::

    python tools/gen_openapi.py           # rewrite docs/openapi.json
    python tools/gen_openapi.py --check   # exit 1 if docs/openapi.json is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ui.openapi import openapi_document, render
from ui.rest import SERVICES

DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = render(openapi_document(SERVICES))
    if args.check:
        if not DOCUMENT.exists() or DOCUMENT.read_text() != text:
            print(f"{DOCUMENT} is stale: run `make openapi`", file=sys.stderr)
            return 1
        return 0
    DOCUMENT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

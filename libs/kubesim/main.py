"""``xmc-kubesim`` (being built: issue 4)."""

import sys

from xmc.placeholder import not_yet


def main() -> None:
    sys.exit(not_yet("xmc-kubesim", 4))

"""Console entry point; the real service lands with issue 7."""

import sys

from xmc.placeholder import not_yet


def main() -> None:
    sys.exit(not_yet("xmc_cli", 7))

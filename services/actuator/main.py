"""Console entry point; the real service lands with issue 5."""

import sys

from xmc.placeholder import not_yet


def main() -> None:
    sys.exit(not_yet("actuator", 5))

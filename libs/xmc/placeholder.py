"""Entry points whose real implementation lands with a later issue.

They exist so the console scripts named in SPEC §11 are installed from day one and fail
loudly (exit code 2) instead of being missing.
"""

import sys


def not_yet(component: str, issue: int) -> int:
    print(f"{component}: not implemented yet (tracked in issue {issue})", file=sys.stderr)
    return 2

"""The xmc_cli service (issue 7)."""

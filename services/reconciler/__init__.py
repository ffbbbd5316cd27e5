"""The reconciler service (issue 6)."""

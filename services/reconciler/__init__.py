"""The Reconciler: the observation loop (SPEC §8)."""

"""ESS: the Experiment State Server."""

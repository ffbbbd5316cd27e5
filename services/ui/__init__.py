"""xmc-ui: the web dashboard and REST/JSON face of the ESS."""

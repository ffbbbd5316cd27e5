"""Shared code of the XMC services: state model, storage, streams, Kubernetes helpers, config."""

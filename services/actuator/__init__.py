"""The actuator service (issue 5)."""

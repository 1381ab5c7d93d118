"""Start, health-check and stop one arm (a version of the service under test)."""

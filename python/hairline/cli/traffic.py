"""Commands of hairline's traffic side (filled in by the traffic work)."""

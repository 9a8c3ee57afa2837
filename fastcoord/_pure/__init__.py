"""Pure-Python twin of the fastcoord core (the readable specification)."""

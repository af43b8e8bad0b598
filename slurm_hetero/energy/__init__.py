"""Energy-aware frequency policies."""

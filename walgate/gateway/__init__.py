"""See DESIGN.md for what this layer owns."""

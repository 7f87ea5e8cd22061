"""bfcl plugin for seal-platform."""

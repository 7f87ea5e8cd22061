"""bfcl_memory: BFCL V4 Memory as a seal-platform benchmark (evaluate and collect)."""

"""Example seal-platform plugin: a repetition diagnoser."""

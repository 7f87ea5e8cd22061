"""controls: label-noise control diagnosers (random labels, a fixed label) for SEAL's ablations."""

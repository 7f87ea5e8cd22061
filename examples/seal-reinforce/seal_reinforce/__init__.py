"""REINFORCE with a baseline, built on the policy runtime (seal_platform_libs.policy) and the core only."""

"""openenv: train on OpenEnv environments (reset/step/state servers) (a default seal-platform plugin)."""

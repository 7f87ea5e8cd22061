"""seal-tensorboard: a tracker plugin for seal-platform (the ``track`` hook) writing TensorBoard event files."""

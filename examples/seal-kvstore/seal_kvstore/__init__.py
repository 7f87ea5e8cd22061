"""seal-kvstore: the example of docs/write-an-environment-plugin.md."""

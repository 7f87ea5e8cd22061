"""mcp: train on the tools of Model Context Protocol servers (a default seal-platform plugin)."""

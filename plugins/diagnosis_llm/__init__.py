"""diagnosis_llm plugin for seal-platform."""

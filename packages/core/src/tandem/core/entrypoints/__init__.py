"""The Python front door: ``LLM``, ``AsyncLLM`` and the engine opener they share."""

"""The engine core of v1: requests, the unified scheduler, the KV cache manager, and the
``EngineCore`` that runs schedule -> execute -> update_from_output."""

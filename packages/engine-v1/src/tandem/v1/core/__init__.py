"""The engine core of v1: requests, the unified scheduler, the KV cache manager, the step
as plain data (``step``: what the worker is handed and returns) and the ``EngineCore``
that runs schedule -> execute -> update_from_output with the worker it is given."""

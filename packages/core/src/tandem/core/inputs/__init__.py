"""The request contract: user input (prompts, SamplingParams) made into one checked
``EngineRequest``."""

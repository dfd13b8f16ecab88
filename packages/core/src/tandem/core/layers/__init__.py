"""Building blocks of the Llama-family models: norms, rotary, attention, MLP."""

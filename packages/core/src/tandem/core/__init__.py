"""Tandem core: config, env vars, sampling params, outputs, tokenizer, models, front door."""

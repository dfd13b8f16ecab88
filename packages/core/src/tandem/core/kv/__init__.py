"""The paged KV cache: its memory budget, its blocks, the sliding window."""

"""What a request returns: ``RequestOutput``, its completions and logprobs."""

"""Process isolation: the zygote, fresh children, the pipe between them, timeouts."""

"""The detokenizer of v1, the logic of its own process: token ids -> text, stop strings
and result deltas (``processor``), and the loop that fronts the engine core (``loop``)."""

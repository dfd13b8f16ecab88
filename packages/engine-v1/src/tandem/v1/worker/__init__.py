"""The worker of v1: the model runner, its persistent input batch and the batched sampler.
It runs the steps it is handed as plain data (``tandem.v1.core.step``) and knows nothing
else of the core, nor the front end, the detokenizer or the processes."""

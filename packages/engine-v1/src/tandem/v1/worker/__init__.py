"""The worker of v1: the model runner, its persistent input batch and the batched sampler.
It knows scheduled requests and tensors; never the front end or the processes."""

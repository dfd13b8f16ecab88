"""The front end of engine v1, in the caller's process: the engine a user builds, the
clients that reach the core, the client-side result streams and the detokenizer logic."""

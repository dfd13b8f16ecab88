"""The front end of engine v1, in the caller's process: the engine a user builds, the
clients that reach the core and the client-side result streams."""

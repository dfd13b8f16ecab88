"""EngineArgs (what a user passes) and the resolved configs both engines run on."""

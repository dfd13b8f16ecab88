"""What both engines share: the ``Engine`` protocol, the model loader, the stop rules, the stats."""

"""A decoder-only model as data: the spec dataclasses (``model``), rope (``rope``) and the
config-field readers (``fields``). They stand below ``layers/`` and ``models/``, which
both read them; nothing here imports torch."""

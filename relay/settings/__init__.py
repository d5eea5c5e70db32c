"""Configuration, validated at startup: the environment and ``--env-file`` (``config``,
``env_file``), providers and model aliases (``providers``, ``model_alias``), which provider a
requested model goes to (``routing``) and the test-only crash points (``crashpoints``)."""

"""Configuration, validated at startup: the environment and ``--env-file`` (``config``,
``env_file``), providers and model aliases (``providers``, ``model_alias``), which provider a
requested model goes to (``routing``), how custom tool calls reach the client
(``custom_calls``), the tunnel program's command line (``tunnel_command``) and the
test-only crash points (``crashpoints``)."""

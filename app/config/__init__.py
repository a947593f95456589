"""The server's options: one declaration each (flags, LLAMA_ARG_* names, defaults, checks), llama-server's
own flag table, against which the unimplemented flags are judged, and the documentation made from them.

Rule: imports the host, the engine's types and the model sources' name parsing, never the HTTP side or
the handlers: the gunicorn master reads the settings before the worker exists."""

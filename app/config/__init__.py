"""The server's options: one declaration each (flags, LLAMA_ARG_* names, defaults, checks), and
llama-server's own flag table, against which the unimplemented flags are judged."""

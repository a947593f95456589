"""The server process: the command line, the gunicorn master and its one worker, and the wiring that
builds the worker's application after the fork."""

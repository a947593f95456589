"""The server process: the command line, the gunicorn master and its one worker, and the wiring that
builds the worker's application after the fork.

Rule: the top floor, the only package that imports every other one; what the gunicorn master imports
(cli.py, gunicorn_server.py) stays free of the engine, llama_cpp, numpy and the HTTP side
(tests/unit/test_structure.py), which the worker imports while its model loads."""

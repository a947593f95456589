"""Agent mode, as llama-server's (``--tools``, ``--tools-runtime``, ``--mcp-servers-*``, ``-ag``): the built-in
tools, where they run (the host, a container, an SSH host), the tools of MCP servers, and the toolbox that
``/tools`` lists and calls. Off unless a flag turns it on; no HTTP here (app/handlers/tools.py serves it)."""

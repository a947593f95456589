"""vertex-llama: llama-server's HTTP API, in Python, over llama.cpp; see README.md for the layers."""

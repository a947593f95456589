"""Handlers: one function per endpoint, ``(ServerContext, ApiRequest) -> ApiReply``.

Rule: handlers parse and validate JSON into engine types as early as possible, submit jobs to the
engine, and render llama-server's response shapes. They import no web framework, and they never
touch llama.cpp objects (tokenizing goes through the engine's vocabulary).
"""

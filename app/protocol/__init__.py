"""What every handler and the HTTP layer speak: the request and reply types, the error table, the
metrics, resumable stream sessions and the OpenAPI document.

Rule: imports only the engine's types and errors below it; never a handler, the HTTP layer or Flask."""

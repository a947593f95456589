"""What every handler and the HTTP layer speak: the request and reply types, the error table, the
metrics, resumable stream sessions and the OpenAPI document. Never imports a handler."""

"""Chat templates: rendering messages with the model's Jinja template or a legacy built-in one, and what
a template can do (tools, reasoning, system role).

Rule: imports only the error table (app.protocol.errors); the template text comes from the engine's
vocabulary through the handlers' context."""

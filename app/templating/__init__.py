"""Chat templates: rendering messages with the model's Jinja template or a legacy built-in one, and what
a template can do (tools, reasoning, system role)."""

"""Router mode: several models behind one port (llama-server's router). The router loads no model: it
starts one child instance of this same server per model and forwards each request to the child its
``model`` names. It never imports the engine."""

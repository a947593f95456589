"""Where a model comes from: local paths and split GGUF files, Hugging Face repositories (-hf) and Cloud
Storage (gs://, AIP_STORAGE_URI).

Rule: imports nothing else of app/; each source hands back local file paths, and the loading is the
engine's."""

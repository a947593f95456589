"""Where a model comes from: local paths and split GGUF files, Hugging Face repositories (-hf) and Cloud
Storage (gs://, AIP_STORAGE_URI)."""

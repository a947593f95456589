"""The host the server runs on: its cgroup limits, usable CPUs and free memory, where llama.cpp's threads
run, and which llama.cpp build fits its CPU.

Rule: the standard library only; nothing of app/ (scripts/dev.sh and the Dockerfile run llama_build.py
before anything is installed)."""

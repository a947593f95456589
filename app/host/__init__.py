"""The host the server runs on: its cgroup limits, usable CPUs and free memory, where llama.cpp's threads
run, and which llama.cpp build fits its CPU. Standard library only."""

"""Benchmarks (not tests): bench/report.py against peers, bench/cpu_builds.py across llama.cpp builds."""

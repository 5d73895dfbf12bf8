"""deltaserve-bench: workloads, results, summaries and plots (run it as bench/deltaserve-bench).

Modules: cli (arguments, exit statuses), client (one streamed request, timed), run (the results
file, probes, run.json), workloads (context-sweep, concurrency-sweep, structured), multi_turn,
soak (with fault hooks), summary (summary.md), plots (PNGs), compare, stats, textgen (seeded
text, tools, replayed conversations), params (argument forms).
"""

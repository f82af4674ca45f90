"""The shape library: AITER's logs, capture CSVs, profiler traces and key texts -> shapes.

Stdlib only, Python >= 3.8. Pure, below everything that imports it: the laptop's parsers and steps and the
node-side helper (orchestrator/nodeside/, pushed to the node with it) use the same files."""

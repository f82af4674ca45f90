"""Pure parsers used on the laptop: op_tests bench output, tuned/untuned CSV tools, model-config shapes.

No I/O beyond reading the files they are given; no remote access. See docs/internals.md
("Laptop-side pure cores").
"""

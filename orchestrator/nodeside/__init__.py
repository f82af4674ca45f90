"""The node-side helper program (SkyPilot's ``sky/skylet/`` is the anchor): what runs in the container.

Stdlib only, Python >= 3.8, package-relative imports. The laptop pushes this package and the packages it
imports (``PUSHED``, below ``orchestrator/`` in ``<base>/helper-<digest>/``; remote/detached.py) and starts
``orchestrator.nodeside.node_helper`` there (docs/internals.md, "Node helper protocol")."""

PUSHED = ("nodeside", "shapelib")   # the packages of orchestrator/ the node helper needs, pushed as they are

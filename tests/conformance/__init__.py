"""Gateway API conformance-style cases for weir (a package, so module names may repeat tests/e2e's)."""

"""The outcome's pure core, beneath the steps that measure and the report that shows: the before/after
comparison, noise-aware verdicts, the tuning budget and key normalisation; no remote I/O."""

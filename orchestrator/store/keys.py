"""The natural keys of the store's records: a job's uid, a row's key text."""

from __future__ import annotations

import hashlib

from ..outcome.keys import norm_key_value


def job_uid(job) -> str:
    """sha1 of (job id, created): the same job on every re-sync and import, another job on another laptop."""
    return hashlib.sha1(f"{job.job_id}|{job.created!r}".encode()).hexdigest()


def row_key(values: dict, keys) -> str:
    """``m=1,n=512,k=7168``: the variant's key columns in order, values normalised as the comparison does."""
    return ",".join(f"{k}={norm_key_value(values.get(k))}" for k in keys)

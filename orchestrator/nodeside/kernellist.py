"""The fingerprint of a variant's kernel list as this AITER install ships it (issue 39's validator; stdlib only,
Python >= 3.8).

A tuner enumerates its candidate kernels from the Python sources beside it: AITER's
``csrc/<variant>/<variant>_tune.py`` imports ``kernels_list`` from ``<variant>_common.py`` and builds the
instances with ``gen_instances.py`` (the MoE codegen and the flydsl ``*_common.py`` likewise). The digest of
those files (every top-level ``*.py`` of the tune script's directory: names and bytes) is the same wherever
the list is unchanged, whatever the version number says; a row tuned where it is equal names kernels this
install has. A change to any of them (even one that leaves the list as it was) changes the digest: the
validator can miss a reuse, never allow a wrong one."""

import hashlib
import os


def kernel_list_digest(tune_script):
    """sha256 hex of the tuner directory's ``*.py`` files (sorted names, each name and its bytes); None when
    the script's directory cannot be read."""
    here = os.path.dirname(os.path.abspath(tune_script))
    try:
        names = sorted(n for n in os.listdir(here) if n.endswith(".py") and os.path.isfile(os.path.join(here, n)))
    except OSError:
        return None
    h = hashlib.sha256()
    for name in names:
        try:
            with open(os.path.join(here, name), "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        h.update(name.encode("utf-8") + b"\0" + str(len(data)).encode("ascii") + b"\0" + data)
    return h.hexdigest() if names else None

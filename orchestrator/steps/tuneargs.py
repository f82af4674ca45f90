"""Tuner controls (issue 12, review P-06): `--tune-arg`, `--splitk`, `--libtype`, `--err-ratio`,
checked against the node tuner's own `--help` (probed by steps/capabilities.py) before anything runs.

`compose(...)` (CLI side) turns the options into the tuner argv tail stored as `request["tune_args"]`
(steps/prepare.py appends it as is); `validate(ctx, variant)` refuses any flag the node's tuner does not
define, and any flag tune-remote sets itself; `splitk_note(...)` says when splitK candidates are skipped.
"""

from __future__ import annotations

import re
import shlex

from ..aiter_profiles import help_flags
from ..errors import UsageError
from ..parsing.sources import flag_values
from ..variants import ALIASES, VARIANTS

# flags tune-remote always sets itself (prepare.tune_command), with the run option that controls them
RESERVED = {"-i": None, "--untune_file": None, "-o": None, "--tune_file": None, "--mp": "--gpus",
            "--batch": "--batch", "--timeout": "--timeout"}
SPLITK_FLAGS = ("-k", "--splitK")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


def compose(tune_args=(), *, splitk: bool = False, libtype: str | None = None,
            err_ratio: float | None = None) -> list[str]:
    """The tuner argv tail from run's options (each --tune-arg value is split like a shell word list)."""
    out: list[str] = []
    if splitk:
        out.append("--splitK")
    if libtype:
        out += ["--libtype", libtype]
    if err_ratio is not None:
        out += ["--errRatio", repr(float(err_ratio))]
    for arg in tune_args:
        try:
            out += shlex.split(arg)
        except ValueError as exc:
            raise UsageError(f"--tune-arg {arg!r}: {exc}", hint="quote each tuner flag, e.g. --tune-arg=--all") from None
    return out


def flags_of(argv: list[str]) -> list[str]:
    """Option names in an argv tail ('--x=1' -> '--x'; negative numbers are values)."""
    return [a.split("=", 1)[0] for a in argv if a.startswith("-") and not _NUMBER.match(a)]


def validate(tune_args: list[str], help_text: str | None, script: str, why_no_help: str | None = None) -> None:
    """Refuse flags the node's tuner does not define (argparse would exit 2 on the node, after the
    baseline benchmark) and flags tune-remote sets itself."""
    if not tune_args:
        return
    for flag in flags_of(tune_args):
        if flag in RESERVED:
            own = RESERVED[flag]
            raise UsageError(f"tuner flag {flag} is set by tune-remote",
                             hint=(f"use run {own}" if own else "tune-remote writes the untuned CSV and "
                                   "tunes the table the server reads; choose shapes with --log/--nk/--shapes-csv"))
    if not help_text:
        raise UsageError(f"cannot check tuner flags {' '.join(flags_of(tune_args))}: {script} --help did not "
                         f"answer on the node" + (f" ({why_no_help})" if why_no_help else ""),
                         hint="run without --tune-arg/--splitk/--libtype/--err-ratio, or fix the tuner's import errors")
    known = help_flags(help_text)
    for flag in flags_of(tune_args):
        if flag not in known:
            extra = ""
            if flag == "--libtype":
                extra = " (AITER's a8w8, a4w4 and batched tuners have no --libtype)"
            raise UsageError(f"the tuner on this node ({script}) has no flag {flag}{extra}",
                             hint="its flags: " + " ".join(sorted(f for f in known if f.startswith("--"))))


def refuse_splitk(tune_args: list[str], variant) -> None:
    """A tuner that raises when given -k/--splitK (``splitk="refuses"``): refused before anything runs."""
    if variant.splitk == "refuses" and any(f in SPLITK_FLAGS for f in flags_of(list(tune_args))):
        why = variant.splitk_refusal or "it raises 'does not support split-K'"
        raise UsageError(f"{variant.name}: its tuner refuses -k/--splitK ({why})",
                         hint="drop --splitk (and -k/--splitK from --tune-arg)")


def splitk_note(tune_args: list[str], help_text: str | None, variant_name: str) -> str | None:
    """The plan's warning when the tuner has -k/--splitK and it is not given (or, where the tuner ignores
    it, that passing it changes nothing)."""
    if not help_text or not any(f in help_flags(help_text) for f in SPLITK_FLAGS):
        return None
    given = any(f in SPLITK_FLAGS for f in flags_of(tune_args))
    entry = VARIANTS.get(ALIASES.get(variant_name, variant_name))
    mode = entry.splitk if entry is not None else "flag"   # KernelVariant.splitk
    if mode == "refuses":
        return None                       # refused before this (refuse_splitk)
    if mode == "never":
        return (f"--splitk changes nothing for {variant_name}: its tuner hard-codes maxsplitK = 0, every row is "
                "measured at KBatch 1 (ROCm/aiter#4448)") if given else None
    if mode == "always":
        return (f"--splitk changes nothing for {variant_name}: its tuner always times its split-K candidates "
                "(the split count is part of each kernelName)") if given else None
    if given:
        return None
    return (f"splitK candidates will be skipped: the {variant_name} tuner tries them only with -k "
            "(pass --splitk; ROCm/aiter#5277/#5278: the shipped gfx950 blockscale table was tuned without "
            "them and lost 13-61 % at low M)")


_Q_DTYPES = ("torch.int8", "torch.float8_e4m3fnuz", "torch.float8_e4m3fn")


def normalize_q_dtype_w(value: str, variants) -> str:
    """--q-dtype-w for --nk shapes: 'int8' / 'torch.int8' / 'float8_e4m3fnuz' -> the torch spelling."""
    from ..variants import VARIANTS
    v = value.strip()
    full = v if v.startswith("torch.") else "torch." + v
    if full not in _Q_DTYPES:
        raise UsageError(f"--q-dtype-w {value!r} is not a weight dtype AITER keys a8w8 tables by",
                         hint="one of: " + ", ".join(_Q_DTYPES) + " (fnuz on gfx942/MI300, e4m3fn on gfx950)")
    named = [n for n in variants if n in VARIANTS]
    if named and not any("q_dtype_w" in VARIANTS[n].key_columns for n in named):
        keyed = " and ".join(n for n, v in VARIANTS.items()
                             if v.family == "gemm" and "q_dtype_w" in v.key_columns)
        raise UsageError(f"--q-dtype-w applies to {keyed}, not {', '.join(named)}",
                         hint="their tables have no q_dtype_w column; drop --q-dtype-w")
    return full


def refuse_values(tune_args: list[str], refused, variant_name: str) -> None:
    """Refuse a tuner flag value the variant's registry entry rules out (``refused_tune_args``)."""
    for flag, value, why in refused:
        if value in flag_values(list(tune_args), flag):
            raise UsageError(f"{variant_name}: tuner flag {flag} {value} is not tuned by tune-remote: {why}",
                             hint=f"drop {flag} {value} (the variant tunes the table its runtime reads)")


def probed_argv(probed_flags, help_text: str | None, tune_args: list[str]) -> list[str]:
    """The registry's ``probed_flags`` fragments this node's tuner has (its --help lists the flag) and the
    user did not set through --tune-arg; none where --help did not answer (the version never decides)."""
    if not help_text:
        return []
    known, given = help_flags(help_text), set(flags_of(list(tune_args)))
    return [a for frag in probed_flags if frag[0] in known and frag[0] not in given for a in frag]

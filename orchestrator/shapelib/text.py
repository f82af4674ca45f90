"""Text facts shared by the node helper and the laptop (review D-09, D-10): ANSI escapes, the line prefixes
serving frameworks put before AITER's messages, and the one key-value normaliser.

Stdlib only, Python >= 3.8: ``orchestrator.shapelib.text`` on the laptop and on the node (pushed there with
the node-side package). It imports nothing of the project.
"""

import re

# CSI (incl. private modes such as tqdm/rich's cursor hide ``\x1b[?25l``), OSC (``\x1b]...BEL`` or ``ST``) and
# two-character escapes (``\x1b7`` save cursor, ``\x1b=`` keypad, ``\x1bM``). Callers on hot paths test
# ``"\x1b" in line`` first.
ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[0-Z\\-_]")


def strip_ansi(text):
    """``text`` without ANSI escape sequences."""
    return ANSI_RE.sub("", text) if "\x1b" in text else text


# The prefixes a serving framework puts before a log record, as regex pieces (no anchors, no trailing space):
VLLM_PREFIX = r"\(\w+ pid=\d+\)"                                  # vLLM: (Worker_TP0 pid=1)
SGLANG_PREFIX = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]"       # SGLang: [2026-02-17 23:52:11 TP4]
AITER_TAG = r"\[aiter(?: [A-Z]+)?\]"                              # AITER: [aiter] / [aiter INFO]
# all three, each optional, in the order they nest: "(Worker_TP0 pid=1) [aiter] ..." -> "..."
LINE_PREFIX_RE = re.compile(r"^(?:%s\s*)?(?:%s\s*)?(?:%s\s?)?" % (VLLM_PREFIX, SGLANG_PREFIX, AITER_TAG))


_VLLM_WHO = re.compile(r"\((\w+ pid=\d+)\)")
_SGLANG_WHO = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?((?: +[A-Z]{2,3}\d+)+) *\]")


def process_of(prefix):
    """The serving process a record's prefix names, or None: vLLM's ``(Worker_TP4_EP4 pid=892) `` ->
    ``Worker_TP4_EP4 pid=892``; SGLang's ``[2026-02-17 23:52:11 TP4] `` -> ``TP4`` (``DP0 TP4``...: the rank
    tags, not the time). A bare ``[aiter] `` names none. Used where AITER logs a miss once per shape per
    process: a shape's weight is then the processes that logged it, not its lines."""
    if not prefix:
        return None
    m = _VLLM_WHO.search(prefix)
    if m:
        return m.group(1)
    m = _SGLANG_WHO.match(prefix.lstrip())
    return m.group(1).strip() if m else None


def strip_prefix(line):
    """``line`` without a leading vLLM / SGLang prefix and ``[aiter]`` tag (ANSI escapes must be gone)."""
    return LINE_PREFIX_RE.sub("", line, count=1)


# --------------------------------------------------------------------------------------------
# key values
# --------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?\d+")
_NULL_TYPES = ("NAType", "NaTType")   # pandas.NA / pandas.NaT, recognised without importing pandas


def key_text(v):
    """The one text of a shape-key value, so that a key read from a CSV, a log or JSON compares equal.

    Integer-like values become their decimal digits: ``16``, ``16.0``, ``"16"``, ``" 16 "``, ``"16.0"``,
    ``"+16"``, ``"1e3"`` (-> ``"1000"``), numpy integers. Booleans are ``"True"``/``"False"``. None, NaN and pandas NA
    become ``""`` (as an empty CSV cell). Any other text is only stripped (``"torch.int8"``, ``"inf"``,
    ``"0.50"``); another float is ``repr`` (``0.5`` -> ``"0.5"``).
    """
    if isinstance(v, str):           # the common case (CSV cells): first
        s = v.strip()
        if _INT_RE.fullmatch(s):
            return str(int(s))
        try:                         # "16.0" from a float CSV column, "1e3"
            f = float(s)
        except ValueError:
            return s
        return str(int(f)) if f.is_integer() else s   # inf / nan: not integers, the text stays
    if v is None:
        return ""
    if isinstance(v, bool):          # a16w16's bias/scaleAB/bpreshuffle: as AITER's tables spell them
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return ""
        return str(int(v)) if v.is_integer() else repr(v)
    if type(v).__name__ in _NULL_TYPES:
        return ""
    if hasattr(v, "item"):           # numpy scalars
        try:
            return key_text(v.item())
        except (TypeError, ValueError):
            pass
    return key_text(str(v))

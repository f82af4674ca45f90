"""op bench_prepare: drop argparse choices= that reject our values, in a patched copy (AST)."""

import ast
import io
import os
import stat
import tokenize

from .common import HelperError
from .files import atomic_write


_NOT_EVALUABLE = object()


def _eval_choices(node, names):
    """Evaluate a choices= expression safely: literals, range(), list/tuple/set/sorted of those,
    and module-level names bound to such values. Returns _NOT_EVALUABLE otherwise."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fname = node.func.id
        if fname == "range" and 1 <= len(node.args) <= 3:
            vals = []
            for a in node.args:
                v = _eval_choices(a, names)
                if not isinstance(v, int) or isinstance(v, bool):
                    return _NOT_EVALUABLE
                vals.append(v)
            return range(*vals)
        if fname in ("list", "tuple", "set", "frozenset", "sorted") and len(node.args) == 1:
            inner = _eval_choices(node.args[0], names)
            if inner is _NOT_EVALUABLE:
                return _NOT_EVALUABLE
            try:
                return list(inner)
            except TypeError:
                return _NOT_EVALUABLE
    return _NOT_EVALUABLE


def _module_literals(tree):
    names = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            val = _eval_choices(stmt.value, names)
            if val is not _NOT_EVALUABLE:
                names[stmt.targets[0].id] = val
    return names


def _value_accepted(value, choices, type_name):
    if isinstance(choices, range) or (type_name == "int"):
        try:
            iv = int(value)
        except (TypeError, ValueError):
            iv = None
        if iv is not None:
            try:
                if iv in choices:
                    return True
            except TypeError:
                pass
    if type_name == "float":
        try:
            if float(value) in choices:
                return True
        except (TypeError, ValueError):
            pass
    try:
        if value in choices:
            return True
    except TypeError:
        pass
    if isinstance(choices, range):
        return False
    return any(str(c) == str(value) for c in choices)


def _line_offsets(source):
    offsets = [0]
    for line in source.splitlines(True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def _ast_pos_to_index(lines, offsets, lineno, col_bytes):
    line = lines[lineno - 1] if lineno - 1 < len(lines) else ""
    col = len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))
    return offsets[lineno - 1] + col


def _choices_removal_spans(source, tokens, offsets, value_start):
    """Character spans to delete so that `choices=<value>` disappears with one separating comma."""
    def idx(pos):
        return offsets[pos[0] - 1] + pos[1]

    sig = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE,
                                               tokenize.INDENT, tokenize.DEDENT)]
    # the `choices` NAME followed by `=` that comes last before the value
    k = None
    for i in range(len(sig) - 1):
        t = sig[i]
        if t.type == tokenize.NAME and t.string == "choices" and sig[i + 1].string == "=" \
                and idx(sig[i + 1].end) <= value_start:
            k = i
    if k is None:
        return None
    kw_start = idx(sig[k].start)
    depth = 0
    j = k + 2
    last_value_end = None
    while j < len(sig):
        t = sig[j]
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            if depth == 0:
                break  # closing paren of the call: no trailing comma
            depth -= 1
        elif t.type == tokenize.OP and t.string == "," and depth == 0:
            return [(kw_start, idx(t.end))]
        last_value_end = idx(t.end)
        j += 1
    if last_value_end is None:
        return None
    prev = sig[k - 1]
    if prev.type == tokenize.OP and prev.string == ",":
        return [(idx(prev.start), idx(prev.end)), (kw_start, last_value_end)]
    return [(kw_start, last_value_end)]


def _option_strings(call):
    out = []
    for a in call.args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            out.append(a.value)
        elif hasattr(ast, "Str") and isinstance(a, getattr(ast, "Str")):  # Python 3.7 AST nodes
            out.append(a.s)
    return out


def _imports_sibling(tree, orig_dir, script_name):
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.level or 0) == 0 and node.module:
            names = [node.module]
        for n in names:
            first = n.split(".")[0]
            if first + ".py" == script_name:
                continue
            if os.path.isfile(os.path.join(orig_dir, first + ".py")) or \
                    os.path.isdir(os.path.join(orig_dir, first)):
                return True
    return False


def _uses_file(tree):
    return any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(tree))


def op_bench_prepare(req):
    script = req.get("script")
    patched_dir = req.get("patched_dir")
    wanted = req.get("args") or {}
    if not script or not os.path.isfile(script):
        if req.get("missing_ok"):
            return {"missing": True, "script": script}
        raise HelperError("bench script %s not found" % script,
                          hint="check meta_root/aiter_root from discover; op_tests/ lives in the checkout")
    with open(script, "rb") as f:
        raw = f.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    source = raw.decode(encoding)
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError as exc:
        raise HelperError("cannot parse %s: %s" % (script, exc),
                          hint="this python cannot parse the script; is it the container's python3?")
    literals = _module_literals(tree)
    lines = source.splitlines(True)
    offsets = _line_offsets(source)

    flags_seen = set()
    to_remove = []   # (flag, value node)
    removed, unverified, checked = [], [], {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            fname = func.attr
        else:
            fname = func.id if isinstance(func, ast.Name) else None
        if fname != "add_argument":
            continue
        opts = _option_strings(node)
        for flag, values in wanted.items():
            if flag not in opts:
                continue
            flags_seen.add(flag)
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if "choices" not in kw:
                continue
            if not isinstance(values, (list, tuple)):
                values = [values]
            choices = _eval_choices(kw["choices"], literals)
            if choices is _NOT_EVALUABLE:
                unverified.append(flag)
                continue
            tnode = kw.get("type")
            type_name = tnode.id if isinstance(tnode, ast.Name) else None
            rejected = [v for v in values if not _value_accepted(v, choices, type_name)]
            checked[flag] = {"rejected": [str(v) for v in rejected]}
            if rejected:
                to_remove.append((flag, kw["choices"]))
    unknown = sorted(f for f in wanted if f not in flags_seen)

    result = {"script": os.path.abspath(script), "patched": False, "removed_choices": [],
              "unverified_choices": sorted(set(unverified)), "unknown_flags": unknown, "checked": checked}
    if not to_remove:
        return result
    if not patched_dir:
        raise HelperError("bench_prepare: %s rejects our values for %s but no patched_dir was given"
                          % (script, sorted({f for f, _ in to_remove})))
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    spans = []
    for flag, value_node in to_remove:
        start = _ast_pos_to_index(lines, offsets, value_node.lineno, value_node.col_offset)
        got = _choices_removal_spans(source, tokens, offsets, start)
        if got is None:
            raise HelperError("bench_prepare: could not locate choices= of %s in %s" % (flag, script))
        spans.extend(got)
        if flag not in removed:
            removed.append(flag)
    new = source
    for a, b in sorted(set(spans), reverse=True):
        new = new[:a] + new[b:]

    orig_dir = os.path.dirname(os.path.abspath(script))
    name = os.path.basename(script)
    need_path = _imports_sibling(tree, orig_dir, name)
    need_file = _uses_file(tree)
    prelude = None
    if need_path or need_file:
        parts = ["import sys as _tune_remote_sys"]
        if need_path:
            parts.append("_tune_remote_sys.path.insert(1, %r)" % orig_dir)
        if need_file:
            parts.append("__file__ = %r" % os.path.abspath(script))
        parts.append("del _tune_remote_sys")
        prelude = "; ".join(parts) + "  # added by tune-remote bench_prepare\n"
        new = _insert_prelude(new, prelude)
    try:
        compile(new, os.path.join(patched_dir, name), "exec")
    except SyntaxError as exc:
        raise HelperError("bench_prepare produced invalid Python for %s: %s" % (script, exc),
                          hint="report this script to tune-remote; run the bench without patching")
    out_path = os.path.join(os.path.abspath(patched_dir), name)
    if os.path.abspath(out_path) == os.path.abspath(script):
        raise HelperError("patched_dir must differ from the script's directory (never edit the original)")
    atomic_write(out_path, new.encode(encoding), stat.S_IMODE(os.stat(script).st_mode))
    result.update({"script": out_path, "patched": True, "removed_choices": removed,
                   "original": os.path.abspath(script), "prelude": prelude is not None})
    return result


def _insert_prelude(source, prelude):
    """Insert one line before the first statement that is not the docstring or a __future__ import."""
    tree = ast.parse(source)
    body = tree.body
    i = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        i = 1
    while i < len(body) and isinstance(body[i], ast.ImportFrom) and body[i].module == "__future__":
        i += 1
    lines = source.splitlines(True)
    if i >= len(body):
        if lines and not lines[-1].endswith(("\n", "\r")):
            return source + "\n" + prelude
        return source + prelude
    stmt = body[i]
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    if stmt.col_offset != 0 or (i > 0 and body[i - 1].end_lineno == first):
        # statement shares a line with the previous one: put the prelude on its own line before it
        return source  # pragma: no cover - exotic layout; sys.path fix skipped
    return "".join(lines[:first - 1]) + prelude + "".join(lines[first - 1:])

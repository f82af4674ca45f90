"""Stream a Chrome-trace JSON (what torch.profiler's ``export_chrome_trace`` writes: vLLM ``--profile`` /
``VLLM_TORCH_PROFILER_DIR``, SGLang ``/start_profile``) event by event, plain or gzip, never whole.

Stdlib only, Python >= 3.8 (pushed into containers with the node helper; imported on the laptop too).

``TraceReader(path)``: ``.events()`` yields each object of the top-level ``traceEvents`` array;
``.meta`` holds the other top-level keys whose values are scalars (``record_shapes``, ``schemaVersion``,
...) seen before the array, and all of them once the events are exhausted. A file that ends inside the
document raises ``TraceFormatError`` ("truncated"); one that is not a JSON object with a
``traceEvents`` array raises it too. The buffer holds one event (plus one read chunk) at a time.
"""

import gzip
import json
import zlib

CHUNK = 1 << 20
MAX_EVENT = 64 << 20          # one event bigger than this is not a trace event (a broken file)
_WS = " \t\r\n"


class TraceFormatError(Exception):
    """The file is not a (complete) Chrome trace; the message says what is missing."""


def open_binary(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


class TraceReader(object):
    def __init__(self, path):
        self.path = path
        self.meta = {}
        self.bytes = 0
        self._dec = json.JSONDecoder()
        self._f = None
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._raw = b""

    # -- buffer -----------------------------------------------------------------------------------
    def _more(self):
        if self._eof:
            return False
        try:
            data = self._f.read(CHUNK)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError("%s: truncated or corrupt compressed file (%s)" % (self.path, exc))
        if not data:
            self._eof = True
            if self._raw:
                raise TraceFormatError("%s: truncated inside a UTF-8 character" % self.path)
            return False
        self.bytes += len(data)
        data = self._raw + data
        try:
            text = data.decode("utf-8")
            self._raw = b""
        except UnicodeDecodeError as exc:
            if exc.start < len(data) - 4:
                text = data.decode("utf-8", "replace")
                self._raw = b""
            else:
                text, self._raw = data[:exc.start].decode("utf-8"), data[exc.start:]
        self._buf = self._buf[self._pos:] + text
        self._pos = 0
        return True

    def _skip_ws(self):
        while True:
            n = len(self._buf)
            while self._pos < n and self._buf[self._pos] in _WS:
                self._pos += 1
            if self._pos < n:
                return self._buf[self._pos]
            if not self._more():
                return ""

    def _expect(self, chars, what):
        c = self._skip_ws()
        if not c:
            raise TraceFormatError("%s: truncated (the file ends where %s was due)" % (self.path, what))
        if c not in chars:
            raise TraceFormatError("%s: not a Chrome trace (%r where %s was due, at byte ~%d)"
                                   % (self.path, c, what, self.bytes))
        self._pos += 1
        return c

    def _value(self, what):
        """One JSON value at the cursor, reading more until it is complete."""
        self._skip_ws()
        while True:
            try:
                val, end = self._dec.raw_decode(self._buf, self._pos)
            except ValueError:
                if len(self._buf) - self._pos > MAX_EVENT:
                    raise TraceFormatError("%s: %s is not valid JSON (byte ~%d)" % (self.path, what, self.bytes))
                if not self._more():
                    raise TraceFormatError("%s: truncated (the file ends inside %s)" % (self.path, what))
                continue
            if end >= len(self._buf) and not self._eof and isinstance(val, (int, float)):
                if self._more():      # a number cut by the chunk end: read on and decode again
                    continue
            self._pos = end
            return val

    # -- document ---------------------------------------------------------------------------------
    def events(self):
        self._f = open_binary(self.path)
        try:
            if self._expect("{[", "the opening '{' of a Chrome trace") == "[":
                # the JSON-array form of the format: the events themselves
                for ev in self._array("a trace event"):
                    yield ev
                return
            found = False
            first = True
            while True:
                c = self._skip_ws()
                if c == "}":
                    self._pos += 1
                    break
                if not first:
                    self._expect(",", "',' between top-level keys")
                first = False
                if self._skip_ws() == "}":    # a trailing comma
                    self._pos += 1
                    break
                key = self._value("a top-level key")
                if not isinstance(key, str):
                    raise TraceFormatError("%s: not a Chrome trace (a top-level key is not a string)" % self.path)
                self._expect(":", "':' after %r" % key)
                if key == "traceEvents":
                    found = True
                    self._expect("[", "the traceEvents array")
                    self._pos -= 1
                    for ev in self._array("a trace event"):
                        yield ev
                else:
                    val = self._value("the value of %r" % key)
                    if not isinstance(val, (dict, list)):
                        self.meta[key] = val
            if not found:
                raise TraceFormatError("%s: no traceEvents array (not a Chrome trace)" % self.path)
        finally:
            self._f.close()

    def _array(self, what):
        self._expect("[", "'['")
        if self._skip_ws() == "]":
            self._pos += 1
            return
        while True:
            ev = self._value(what)
            if isinstance(ev, dict):
                yield ev
            c = self._expect(",]", "',' or ']' in the traceEvents array")
            if c == "]":
                return
            if self._skip_ws() == "]":        # a trailing comma, as some writers leave
                self._pos += 1
                return

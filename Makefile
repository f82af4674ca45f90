PY ?= python

.PHONY: test demo install

install:
	$(PY) -m pip install -e ".[test]"

test:
	$(PY) -m pytest -q

demo:
	tune-remote demo

